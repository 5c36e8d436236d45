package layout

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/outbox"
)

// Builder does the byte work every shape shares: it reads a row's topic,
// timestamp, id, key and payload, carves a record's bytes from one
// allocation, sets the headers outboxd owns (the id, then the source)
// and the row's own (header columns, the headers column), and describes
// a row that cannot become a record as a *outbox.RowError. A shape
// decides what goes where; the Builder keeps the invariants (copies what
// it keeps, the id header first, no reserved topic). One Builder serves
// one stream, in order; it is not safe for concurrent use.
type Builder struct {
	cols Columns // with defaults

	// The place of the row or message being laid out.
	commitTime time.Time
	commitLSN  outbox.LSN
	index      int

	hdrs    []outbox.Header   // scratch for the headers of the event being built
	scratch []byte            // scratch: the topic being built
	names   map[string]string // interned topics and header keys
	types   *pgtype.Map       // pgx's codecs, for a timestamp column; made when first needed
}

// Bounds of the string interning in Builder.names.
const (
	maxInterned    = 4096
	maxInternedLen = 256
)

// at sets the place in the stream of the row or message being laid out.
func (b *Builder) at(commitTime time.Time, commitLSN outbox.LSN, index int) {
	b.commitTime, b.commitLSN, b.index = commitTime, commitLSN, index
}

// intern returns s as a string, reusing an earlier string with the same
// bytes: topics and header keys repeat from row to row.
func (b *Builder) intern(s []byte) string {
	if v, ok := b.names[string(s)]; ok {
		return v
	}
	v := string(s)
	if len(b.names) < maxInterned && len(v) <= maxInternedLen {
		b.names[v] = v
	}
	return v
}

// event starts the record of a row of t: its topic and place in the
// stream, and its timestamp when the table has a timestamp column.
func (b *Builder) event(t *Table, row []outbox.Value) (outbox.Event, error) {
	topic, col, err := b.appendTopic(b.scratch[:0], t, row)
	b.scratch = topic[:0]
	if err != nil {
		return outbox.Event{}, b.rowError(t, row, col, err)
	}
	ev := outbox.Event{Table: t.Table, Topic: b.intern(topic), CommitTime: b.commitTime, CommitLSN: b.commitLSN, Index: b.index}
	if ts := t.val(row, roleTimestamp); ts.Present() {
		if ev.Timestamp, err = b.parseTimestamp(ts, t.oid[roleTimestamp]); err != nil {
			return outbox.Event{}, b.rowError(t, row, t.pos[roleTimestamp], err)
		}
	}
	return ev, nil
}

// alloc makes the one allocation of a record's bytes, size long at
// first, and appends the outbox id to it: the id header's value.
func (b *Builder) alloc(t *Table, row []outbox.Value, size int) (buf, id []byte, err error) {
	buf, err = appendID(make([]byte, 0, size), t.val(row, roleID), t.oid[roleID])
	if err != nil {
		return nil, nil, b.rowError(t, row, t.pos[roleID], err)
	}
	return buf, buf[:len(buf):len(buf)], nil
}

// headersFrom starts the headers of a record: the id header, then the
// source header when there is a source, its value carved from buf.
func (b *Builder) headersFrom(buf, id []byte, source string) []byte {
	b.hdrs = append(b.hdrs[:0], outbox.Header{Key: "id", Value: id})
	if source == "" {
		return buf
	}
	start := len(buf)
	buf = append(buf, source...)
	b.hdrs = append(b.hdrs, outbox.Header{Key: outbox.SourceHeader, Value: buf[start:len(buf):len(buf)]})
	return buf
}

// finish gives ev the headers built, in one allocation of their own.
func (b *Builder) finish(ev outbox.Event) outbox.Event {
	ev.Headers = make([]outbox.Header, len(b.hdrs))
	copy(ev.Headers, b.hdrs)
	clear(b.hdrs) // do not keep this event's bytes alive
	return ev
}

// fail drops the headers built and describes the row as a row error.
func (b *Builder) fail(t *Table, row []outbox.Value, col int, err error) error {
	clear(b.hdrs)
	return b.rowError(t, row, col, err)
}

// record makes the record of a row of t as the default table's layout
// has it (see plain): topic, key and payload as they are, the id and
// source headers, then attrs' (a shape's fixed headers, such as
// CloudEvents' attributes, given the id and the record's time; nil: none), then the row's own headers, which
// reserved (nil: none) may refuse. All its bytes (headers, key, value)
// are carved from one allocation.
func (b *Builder) record(t *Table, row []outbox.Value, attrs func(buf, id []byte, at time.Time) ([]byte, int, error), reserved func(key string) error) (outbox.Event, error) {
	ev, err := b.event(t, row)
	if err != nil {
		return ev, err
	}
	id, key, payload, headers := t.val(row, roleID), t.val(row, roleKey), t.val(row, rolePayload), t.val(row, roleHeaders)
	// One allocation holds all: decoded values are at most as long as their
	// text, except in rare cases (a binary uuid key or integer header
	// column, invalid UTF-8 replaced in an escaped header string) where
	// append grows buf; the slices carved before stay valid either way.
	size := 20 + len(id.Data) + len(key.Data) + len(payload.Data) + len(headers.Data) + len(t.source)
	for _, p := range t.hdr {
		size += len(row[p].Data)
	}
	buf, idValue, err := b.alloc(t, row, size)
	if err != nil {
		return outbox.Event{}, err
	}
	if key.Present() {
		start := len(buf)
		if buf, err = appendKey(buf, key, t.oid[roleKey]); err != nil {
			return outbox.Event{}, b.rowError(t, row, t.pos[roleKey], err)
		}
		ev.Key = buf[start:len(buf):len(buf)]
	}
	if payload.Present() {
		start := len(buf)
		if buf, err = appendPayload(buf, payload, t.oid[rolePayload]); err != nil {
			return outbox.Event{}, b.rowError(t, row, t.pos[rolePayload], err)
		}
		ev.Value = buf[start:len(buf):len(buf)]
	}
	buf = b.headersFrom(buf, idValue, t.source)
	if attrs != nil {
		var col int
		if buf, col, err = attrs(buf, idValue, ev.RecordTime()); err != nil {
			return outbox.Event{}, b.fail(t, row, col, err)
		}
	}
	fixed := len(b.hdrs) // the headers outboxd sets; the row's own follow
	for _, p := range t.hdr {
		h := outbox.Header{Key: t.Columns[p].Name}
		if v := row[p]; v.Present() {
			start := len(buf)
			if buf, err = appendText(buf, v, t.Columns[p].TypeOID); err != nil {
				return outbox.Event{}, b.fail(t, row, p, fmt.Errorf("header column: %w", err))
			}
			h.Value = buf[start:len(buf):len(buf)] // never nil: buf is not
		}
		b.hdrs = append(b.hdrs, h)
	}
	if headers.Present() {
		raw, err := jsonText(headers, t.oid[roleHeaders])
		if err == nil {
			b.hdrs, _, err = b.appendHeaders(b.hdrs, buf, raw)
		}
		if err != nil {
			return outbox.Event{}, b.fail(t, row, t.pos[roleHeaders], err)
		}
	}
	if err := b.checkOwnHeaders(fixed, reserved); err != nil {
		return outbox.Event{}, b.fail(t, row, t.pos[roleHeaders], err)
	}
	return b.finish(ev), nil
}

// checkOwnHeaders refuses a header of the record's own (b.hdrs from fixed
// on) that reserved refuses (nil: none is).
func (b *Builder) checkOwnHeaders(fixed int, reserved func(key string) error) error {
	if reserved == nil {
		return nil
	}
	for _, h := range b.hdrs[fixed:] {
		if err := reserved(h.Key); err != nil {
			return err
		}
	}
	return nil
}

// rowError describes a row that cannot become a record, with what could be
// read of it (copied: the row's bytes alias the message). col is the
// position of the column at fault, -1 for the table as a whole.
func (b *Builder) rowError(t *Table, row []outbox.Value, col int, err error) error {
	e := &outbox.RowError{Table: t.Table, Source: t.source, Err: err, CommitTime: b.commitTime, CommitLSN: b.commitLSN, Index: b.index}
	if col >= 0 {
		e.Column = t.Columns[col].Name
	}
	if id, err := appendID(nil, t.val(row, roleID), t.oid[roleID]); err == nil {
		e.ID = string(id)
	}
	// The topic template of an unusable table may lack a placeholder.
	if topic, _, err := b.appendTopic(b.scratch[:0], t, row); err == nil && t.unusable == nil {
		e.Topic = string(topic)
	}
	if k := t.val(row, roleKey); k.Present() {
		e.Key, _ = appendKey(nil, k, t.oid[roleKey]) // nil when it cannot be read
	}
	if p := t.val(row, rolePayload); p.Present() {
		var perr error
		if e.Value, perr = appendPayload(nil, p, t.oid[rolePayload]); perr != nil {
			e.Value = append([]byte(nil), p.Data...) // as sent
		}
	}
	return e
}

// appendTopic appends the row's topic: the topic column's value, or the
// topic template with each placeholder replaced. col is the position of the
// column at fault when it returns an error.
func (b *Builder) appendTopic(buf []byte, t *Table, row []outbox.Value) (topic []byte, col int, err error) {
	if t.tmpl == nil {
		v := t.val(row, roleTopic)
		switch {
		case !v.Present():
			return buf, t.pos[roleTopic], errors.New("null topic")
		case len(v.Data) == 0:
			return buf, t.pos[roleTopic], errors.New("empty topic")
		}
		buf = append(buf, v.Data...)
		return buf, t.pos[roleTopic], b.checkTopic(buf)
	}
	if buf, col, err = appendTemplate(buf, "topic template", t.tmpl, row, t.emptyTemplateValue); err != nil {
		return buf, col, err
	}
	if len(buf) == 0 {
		return buf, -1, errors.New("empty topic")
	}
	return buf, -1, b.checkTopic(buf)
}

// checkTopic refuses a topic no record may name: a Kafka internal topic
// ("__" prefix) or one of Columns.ReservedTopics.
func (b *Builder) checkTopic(topic []byte) error {
	if len(topic) >= 2 && topic[0] == '_' && topic[1] == '_' {
		return fmt.Errorf("topic %s is a Kafka internal topic (its name begins with \"__\"): no record may be published there", quoteShort(topic))
	}
	for _, r := range b.cols.ReservedTopics {
		if string(topic) == r {
			return fmt.Errorf("topic %s is reserved for outboxd's own records (its progress or dead-letter topic): no record may be published there", quoteShort(topic))
		}
	}
	return nil
}

// appendTemplate appends a template with each placeholder replaced by its
// column's text form; a NULL or empty value is an error (col: its column).
func appendTemplate(buf []byte, what string, parts []tmplPart, row []outbox.Value, emptyOK bool) (out []byte, col int, err error) {
	for _, p := range parts {
		if p.column == "" {
			buf = append(buf, p.literal...)
			continue
		}
		v := row[p.col]
		if !v.Present() {
			return buf, p.col, fmt.Errorf("null value in the %s", what)
		}
		n := len(buf)
		if buf, err = appendText(buf, v, p.oid); err != nil {
			return buf, p.col, fmt.Errorf("%s: %w", what, err)
		}
		if len(buf) == n && !emptyOK {
			return buf, p.col, fmt.Errorf("empty value in the %s", what)
		}
	}
	return buf, -1, nil
}

// typeMap returns pgx's codecs, made when first needed.
func (b *Builder) typeMap() *pgtype.Map {
	if b.types == nil {
		b.types = pgtype.NewMap()
	}
	return b.types
}

// parseTimestamp reads a timestamptz or timestamp value (text as the
// walsender's DateStyle ISO writes it, or binary) with pgx's codecs; a
// timestamp without time zone is UTC. infinity is an error: a record
// timestamp is a finite time.
func (b *Builder) parseTimestamp(v outbox.Value, oid uint32) (time.Time, error) {
	types := b.typeMap()
	format := int16(pgtype.TextFormatCode)
	if v.Format == outbox.ValueBinary {
		format = pgtype.BinaryFormatCode
	}
	var ts pgtype.Timestamptz
	if oid == oidTimestamp {
		var t pgtype.Timestamp
		if err := types.Scan(oid, format, v.Data, &t); err != nil {
			return time.Time{}, fmt.Errorf("timestamp %s: %w", quoteShort(v.Data), err)
		}
		ts = pgtype.Timestamptz{Time: t.Time, InfinityModifier: t.InfinityModifier, Valid: t.Valid}
	} else if err := types.Scan(oid, format, v.Data, &ts); err != nil {
		return time.Time{}, fmt.Errorf("timestamp %s: %w", quoteShort(v.Data), err)
	}
	if ts.InfinityModifier != pgtype.Finite {
		return time.Time{}, fmt.Errorf("timestamp %s is not a finite time", quoteShort(v.Data))
	}
	return ts.Time, nil
}
