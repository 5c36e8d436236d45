package layout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/outboxd/outboxd/outbox"
)

// val is the value of the role's column in row; absent (kind 0) when the
// table has no such column.
func (rel *table) val(row []outbox.Value, role int) outbox.Value {
	if p := rel.pos[role]; p >= 0 {
		return row[p]
	}
	return outbox.Value{}
}

// rowError describes a row that cannot become a record, with what could be
// read of it (copied: the row's bytes alias the message). col is the
// position of the column at fault, -1 for the table as a whole.
func (l *Layout) rowError(rel *table, row []outbox.Value, col int, err error) error {
	e := &outbox.RowError{Table: rel.Table, Source: rel.source, Err: err, CommitTime: l.commitTime, CommitLSN: l.commitLSN, Index: l.index}
	if col >= 0 {
		e.Column = rel.Columns[col].Name
	}
	if id, err := appendID(nil, rel.val(row, roleID), rel.oid[roleID]); err == nil {
		e.ID = string(id)
	}
	// The topic template of an unusable table may lack a placeholder.
	if t, _, err := l.appendTopic(l.scratch[:0], rel, row); err == nil && rel.unusable == nil {
		e.Topic = string(t)
	}
	if k := rel.val(row, roleKey); k.Present() {
		e.Key, _ = appendKey(nil, k, rel.oid[roleKey]) // nil when it cannot be read
	}
	if p := rel.val(row, rolePayload); p.Present() {
		var perr error
		if e.Value, perr = appendPayload(nil, p, rel.oid[rolePayload]); perr != nil {
			e.Value = append([]byte(nil), p.Data...) // as sent
		}
	}
	return e
}

// appendTopic appends the row's topic: the topic column's value, or the
// topic template with each placeholder replaced. col is the position of the
// column at fault when it returns an error.
func (l *Layout) appendTopic(buf []byte, rel *table, row []outbox.Value) (topic []byte, col int, err error) {
	if rel.tmpl == nil {
		t := rel.val(row, roleTopic)
		switch {
		case !t.Present():
			return buf, rel.pos[roleTopic], errors.New("null topic")
		case len(t.Data) == 0:
			return buf, rel.pos[roleTopic], errors.New("empty topic")
		}
		buf = append(buf, t.Data...)
		return buf, rel.pos[roleTopic], l.checkTopic(buf)
	}
	if buf, col, err = appendTemplate(buf, "topic template", rel.tmpl, row, rel.emptyTemplateValue); err != nil {
		return buf, col, err
	}
	if len(buf) == 0 {
		return buf, -1, errors.New("empty topic")
	}
	return buf, -1, l.checkTopic(buf)
}

// checkTopic refuses a topic no record may name: a Kafka internal topic
// ("__" prefix) or one of Columns.ReservedTopics.
func (l *Layout) checkTopic(topic []byte) error {
	if len(topic) >= 2 && topic[0] == '_' && topic[1] == '_' {
		return fmt.Errorf("topic %s is a Kafka internal topic (its name begins with \"__\"): no record may be published there", quoteShort(topic))
	}
	for _, r := range l.cols.ReservedTopics {
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

// buildEvent turns the column values of a well-formed insert into an
// Event. All its bytes (id and source headers, key, value, header values)
// are carved from one allocation.
func (l *Layout) buildEvent(rel *table, row []outbox.Value) (outbox.Event, error) {
	id := rel.val(row, roleID)
	topic, col, err := l.appendTopic(l.scratch[:0], rel, row)
	l.scratch = topic[:0]
	if err != nil {
		return outbox.Event{}, l.rowError(rel, row, col, err)
	}
	ev := outbox.Event{Table: rel.Table, Topic: l.intern(topic), CommitTime: l.commitTime,
		CommitLSN: l.commitLSN, Index: l.index}
	if ts := rel.val(row, roleTimestamp); ts.Present() {
		if ev.Timestamp, err = l.parseTimestamp(ts, rel.oid[roleTimestamp]); err != nil {
			return outbox.Event{}, l.rowError(rel, row, rel.pos[roleTimestamp], err)
		}
	}

	key, payload, headers := rel.val(row, roleKey), rel.val(row, rolePayload), rel.val(row, roleHeaders)
	// One allocation holds all: decoded values are at most as long as their
	// text, except in rare cases (a binary uuid key or integer header
	// column, invalid UTF-8 replaced in an escaped header string) where
	// append grows buf; the slices carved before stay valid either way.
	size := 20 + len(id.Data) + len(key.Data) + len(payload.Data) + len(headers.Data) + len(rel.source)
	for _, p := range rel.hdr {
		size += len(row[p].Data)
	}
	buf, err := appendID(make([]byte, 0, size), id, rel.oid[roleID])
	if err != nil {
		return outbox.Event{}, l.rowError(rel, row, rel.pos[roleID], err)
	}
	idValue := buf[:len(buf):len(buf)]

	if key.Present() {
		start := len(buf)
		if buf, err = appendKey(buf, key, rel.oid[roleKey]); err != nil {
			return outbox.Event{}, l.rowError(rel, row, rel.pos[roleKey], err)
		}
		ev.Key = buf[start:len(buf):len(buf)]
	}
	if payload.Present() {
		start := len(buf)
		buf, err = appendPayload(buf, payload, rel.oid[rolePayload])
		if err != nil {
			return outbox.Event{}, l.rowError(rel, row, rel.pos[rolePayload], err)
		}
		ev.Value = buf[start:len(buf):len(buf)]
	}

	l.hdrs = append(l.hdrs[:0], outbox.Header{Key: "id", Value: idValue})
	buf = l.appendSource(buf, rel.source)
	if l.cols.CloudEvents != nil {
		var col int
		if buf, col, err = l.appendCloudEvents(buf, rel, row, idValue, ev.RecordTime()); err != nil {
			clear(l.hdrs)
			return outbox.Event{}, l.rowError(rel, row, col, err)
		}
	}
	fixed := len(l.hdrs) // the headers outboxd sets; the row's own follow
	for _, p := range rel.hdr {
		h := outbox.Header{Key: rel.Columns[p].Name}
		if v := row[p]; v.Present() {
			start := len(buf)
			if buf, err = appendText(buf, v, rel.Columns[p].TypeOID); err != nil {
				clear(l.hdrs)
				return outbox.Event{}, l.rowError(rel, row, p, fmt.Errorf("header column: %w", err))
			}
			h.Value = buf[start:len(buf):len(buf)] // never nil: buf is not
		}
		l.hdrs = append(l.hdrs, h)
	}
	if headers.Present() {
		raw, err := jsonText(headers, rel.oid[roleHeaders])
		if err == nil {
			l.hdrs, _, err = l.appendHeaders(l.hdrs, buf, raw)
		}
		if err != nil {
			clear(l.hdrs)
			return outbox.Event{}, l.rowError(rel, row, rel.pos[roleHeaders], err)
		}
	}
	if err := l.checkCloudEventsHeaders(fixed); err != nil {
		clear(l.hdrs)
		return outbox.Event{}, l.rowError(rel, row, rel.pos[roleHeaders], err)
	}
	ev.Headers = make([]outbox.Header, len(l.hdrs))
	copy(ev.Headers, l.hdrs)
	clear(l.hdrs) // do not keep this event's bytes alive
	return ev, nil
}

// appendID appends the outbox id in text form: an integer in decimal, a
// uuid in its canonical form, text as it is (never empty). Text format is
// checked (an integer column sends digits, but a corrupt stream must not
// put anything else in the id header); binary format is a big-endian
// integer of the column's width, or a uuid's 16 bytes.
func appendID(buf []byte, v outbox.Value, oid uint32) ([]byte, error) {
	switch v.Format {
	case outbox.ValueText:
		switch oid {
		case oidInt8, oidInt4, oidInt2:
			if _, err := strconv.ParseInt(string(v.Data), 10, 64); err != nil {
				return buf, fmt.Errorf("id %s is not an integer", quoteShort(v.Data))
			}
		case oidUUID:
			if len(v.Data) != 36 {
				return buf, fmt.Errorf("id %s is not a uuid", quoteShort(v.Data))
			}
		}
		if len(v.Data) == 0 {
			return buf, errors.New("empty id")
		}
		return append(buf, v.Data...), nil
	case outbox.ValueBinary:
		want := 8
		switch oid {
		case oidInt4:
			want = 4
		case oidInt2:
			want = 2
		case oidUUID:
			want = 16
		case oidText, oidVarchar:
			if len(v.Data) == 0 {
				return buf, errors.New("empty id")
			}
			return append(buf, v.Data...), nil
		}
		switch {
		case len(v.Data) != want:
		case want == 16:
			return appendUUID(buf, v.Data), nil
		case want == 8:
			return strconv.AppendInt(buf, int64(binary.BigEndian.Uint64(v.Data)), 10), nil
		case want == 4:
			return strconv.AppendInt(buf, int64(int32(binary.BigEndian.Uint32(v.Data))), 10), nil
		case want == 2:
			return strconv.AppendInt(buf, int64(int16(binary.BigEndian.Uint16(v.Data))), 10), nil
		}
		return buf, fmt.Errorf("binary %s id is %d bytes, want %d", describeType(oid), len(v.Data), want)
	}
	return buf, errors.New("null id")
}

// appendUUID appends a uuid's 16 bytes in canonical text form.
func appendUUID(buf, b []byte) []byte {
	const hexDigits = "0123456789abcdef"
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			buf = append(buf, '-')
		}
		buf = append(buf, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return buf
}

// appendKey appends the aggregate id in text form.
func appendKey(buf []byte, v outbox.Value, oid uint32) ([]byte, error) {
	if v.Format == outbox.ValueBinary {
		switch oid {
		case oidUUID:
			if len(v.Data) == 16 {
				return appendUUID(buf, v.Data), nil
			}
		case oidInt8, oidInt4, oidInt2: // the key is the decimal text, as in text format
			out, err := appendID(buf, v, oid)
			if err != nil {
				return buf, fmt.Errorf("key: %w", err)
			}
			return out, nil
		}
	}
	return append(buf, v.Data...), nil
}

// appendPayload appends the payload bytes: bytea decoded from its text form
// to raw bytes, jsonb in binary format without its version byte, anything
// else as sent.
func appendPayload(buf []byte, v outbox.Value, oid uint32) ([]byte, error) {
	switch {
	case oid == oidBytea && v.Format == outbox.ValueText:
		return appendBytea(buf, v.Data)
	case oid == oidJSONB && v.Format == outbox.ValueBinary:
		raw, err := jsonText(v, oid)
		if err != nil {
			return buf, err
		}
		return append(buf, raw...), nil
	}
	return append(buf, v.Data...), nil
}

// jsonText returns the JSON text of a json or jsonb value: binary jsonb is
// a version byte (1) followed by the text.
func jsonText(v outbox.Value, oid uint32) ([]byte, error) {
	if oid != oidJSONB || v.Format != outbox.ValueBinary {
		return v.Data, nil
	}
	if len(v.Data) == 0 || v.Data[0] != 1 {
		return nil, errors.New("binary jsonb value without version 1 prefix")
	}
	return v.Data[1:], nil
}
