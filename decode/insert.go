package decode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/outboxd/outboxd/outbox"
)

// decodeInsert parses an Insert message (body after the type byte):
// Int32 relation id, Byte1('N'), TupleData. It is the hot path: the tuple is
// walked in place, and the event's bytes are copied into one allocation.
// (pglogrepl's InsertMessage.Decode allocates per column and reads past the
// end of a truncated message.)
func (d *Decoder) decodeInsert(body []byte) (Message, error) {
	r := reader{buf: body}
	relID, err := r.uint32("relation id")
	if err != nil {
		return Message{}, fmt.Errorf("decoding insert: %w", err)
	}
	rel := d.rels[relID]
	if rel == nil {
		return Message{}, fmt.Errorf("decoding insert: unknown relation id %d (no valid relation message for it)", relID)
	}
	if !d.inTx {
		return Message{}, rel.insertError(errors.New("insert outside a transaction"))
	}
	kind, err := r.uint8("tuple kind")
	if err != nil {
		return Message{}, rel.insertError(err)
	}
	if kind != 'N' {
		return Message{}, rel.insertError(fmt.Errorf("tuple kind %q, want 'N'", kind))
	}
	n, err := r.uint16("column count")
	if err != nil {
		return Message{}, rel.insertError(err)
	}
	if int(n) != len(rel.columns) {
		return Message{}, rel.insertError(fmt.Errorf("tuple has %d columns, the relation message described %d", n, len(rel.columns)))
	}
	row := d.row[:0]
	for i := range rel.columns {
		kind, data, err := nextValue(&r)
		if err != nil {
			return Message{}, rel.insertError(fmt.Errorf("column %q: %w", rel.columns[i].Name, err))
		}
		if kind == valueUnchanged {
			return Message{}, rel.insertError(fmt.Errorf("column %q: unchanged TOAST value in an insert", rel.columns[i].Name))
		}
		row = append(row, value{kind: kind, data: data})
	}
	d.row = row
	defer clear(d.row) // its values alias the message
	if err := r.done(); err != nil {
		return Message{}, rel.insertError(err)
	}
	if rel.unusable != nil {
		return Message{}, d.rowError(rel, row, -1, rel.unusable)
	}
	ev, err := d.buildEvent(rel, row)
	if err != nil {
		return Message{}, err
	}
	return Message{Kind: KindEvent, Event: ev}, nil
}

func (rel *relation) insertError(err error) error {
	return fmt.Errorf("decoding insert into %s: %w", rel.table, err)
}

// val is the value of the role's column in row; absent (kind 0) when the
// table has no such column.
func (rel *relation) val(row []value, role int) value {
	if p := rel.pos[role]; p >= 0 {
		return row[p]
	}
	return value{}
}

// rowError describes a row that cannot become a record, with what could be
// read of it (copied: the row's bytes alias the message). col is the
// position of the column at fault, -1 for the table as a whole.
func (d *Decoder) rowError(rel *relation, row []value, col int, err error) error {
	e := &RowError{Table: rel.table, Source: rel.source, Err: err, CommitTime: d.commitTime, CommitLSN: d.commitLSN, Index: d.index}
	d.index++ // the row keeps its place among the transaction's events
	if col >= 0 {
		e.Column = rel.columns[col].Name
	}
	if id, err := appendID(nil, rel.val(row, roleID), rel.oid[roleID]); err == nil {
		e.ID = string(id)
	}
	// The topic template of an unusable table may lack a placeholder.
	if t, _, err := d.appendTopic(d.scratch[:0], rel, row); err == nil && rel.unusable == nil {
		e.Topic = string(t)
	}
	if k := rel.val(row, roleKey); k.present() {
		e.Key, _ = appendKey(nil, k, rel.oid[roleKey]) // nil when it cannot be read
	}
	if p := rel.val(row, rolePayload); p.present() {
		var perr error
		if e.Value, perr = appendPayload(nil, p, rel.oid[rolePayload]); perr != nil {
			e.Value = append([]byte(nil), p.data...) // as sent
		}
	}
	return e
}

// appendTopic appends the row's topic: the topic column's value, or the
// topic template with each placeholder replaced. col is the position of the
// column at fault when it returns an error.
func (d *Decoder) appendTopic(buf []byte, rel *relation, row []value) (topic []byte, col int, err error) {
	if rel.tmpl == nil {
		t := rel.val(row, roleTopic)
		switch {
		case !t.present():
			return buf, rel.pos[roleTopic], errors.New("null topic")
		case len(t.data) == 0:
			return buf, rel.pos[roleTopic], errors.New("empty topic")
		}
		buf = append(buf, t.data...)
		return buf, rel.pos[roleTopic], d.checkTopic(buf)
	}
	if buf, col, err = appendTemplate(buf, "topic template", rel.tmpl, row, rel.emptyTemplateValue); err != nil {
		return buf, col, err
	}
	if len(buf) == 0 {
		return buf, -1, errors.New("empty topic")
	}
	return buf, -1, d.checkTopic(buf)
}

// checkTopic refuses a topic no record may name: a Kafka internal topic
// ("__" prefix) or one of Columns.ReservedTopics.
func (d *Decoder) checkTopic(topic []byte) error {
	if len(topic) >= 2 && topic[0] == '_' && topic[1] == '_' {
		return fmt.Errorf("topic %s is a Kafka internal topic (its name begins with \"__\"): no record may be published there", quoteShort(topic))
	}
	for _, r := range d.cols.ReservedTopics {
		if string(topic) == r {
			return fmt.Errorf("topic %s is reserved for outboxd's own records (its progress or dead-letter topic): no record may be published there", quoteShort(topic))
		}
	}
	return nil
}

// appendTemplate appends a template with each placeholder replaced by its
// column's text form; a NULL or empty value is an error (col: its column).
func appendTemplate(buf []byte, what string, parts []tmplPart, row []value, emptyOK bool) (out []byte, col int, err error) {
	for _, p := range parts {
		if p.column == "" {
			buf = append(buf, p.literal...)
			continue
		}
		v := row[p.col]
		if !v.present() {
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
func (d *Decoder) buildEvent(rel *relation, row []value) (outbox.Event, error) {
	if d.cols.Debezium != nil {
		return d.buildDebeziumEvent(rel, row)
	}
	id := rel.val(row, roleID)
	topic, col, err := d.appendTopic(d.scratch[:0], rel, row)
	d.scratch = topic[:0]
	if err != nil {
		return outbox.Event{}, d.rowError(rel, row, col, err)
	}
	ev := outbox.Event{Table: rel.table, Topic: d.intern(topic), CommitTime: d.commitTime,
		CommitLSN: d.commitLSN, Index: d.index}
	if ts := rel.val(row, roleTimestamp); ts.present() {
		if ev.Timestamp, err = d.parseTimestamp(ts, rel.oid[roleTimestamp]); err != nil {
			return outbox.Event{}, d.rowError(rel, row, rel.pos[roleTimestamp], err)
		}
	}

	key, payload, headers := rel.val(row, roleKey), rel.val(row, rolePayload), rel.val(row, roleHeaders)
	// One allocation holds all: decoded values are at most as long as their
	// text, except in rare cases (a binary uuid key or integer header
	// column, invalid UTF-8 replaced in an escaped header string) where
	// append grows buf; the slices carved before stay valid either way.
	size := 20 + len(id.data) + len(key.data) + len(payload.data) + len(headers.data) + len(rel.source)
	for _, p := range rel.hdr {
		size += len(row[p].data)
	}
	buf, err := appendID(make([]byte, 0, size), id, rel.oid[roleID])
	if err != nil {
		return outbox.Event{}, d.rowError(rel, row, rel.pos[roleID], err)
	}
	idValue := buf[:len(buf):len(buf)]

	if key.present() {
		start := len(buf)
		if buf, err = appendKey(buf, key, rel.oid[roleKey]); err != nil {
			return outbox.Event{}, d.rowError(rel, row, rel.pos[roleKey], err)
		}
		ev.Key = buf[start:len(buf):len(buf)]
	}
	if payload.present() {
		start := len(buf)
		buf, err = appendPayload(buf, payload, rel.oid[rolePayload])
		if err != nil {
			return outbox.Event{}, d.rowError(rel, row, rel.pos[rolePayload], err)
		}
		ev.Value = buf[start:len(buf):len(buf)]
	}

	d.hdrs = append(d.hdrs[:0], outbox.Header{Key: "id", Value: idValue})
	buf = d.appendSource(buf, rel.source)
	if d.cols.CloudEvents != nil {
		var col int
		if buf, col, err = d.appendCloudEvents(buf, rel, row, idValue, ev.RecordTime()); err != nil {
			clear(d.hdrs)
			return outbox.Event{}, d.rowError(rel, row, col, err)
		}
	}
	fixed := len(d.hdrs) // the headers outboxd sets; the row's own follow
	for _, p := range rel.hdr {
		h := outbox.Header{Key: rel.columns[p].Name}
		if v := row[p]; v.present() {
			start := len(buf)
			if buf, err = appendText(buf, v, rel.columns[p].TypeOID); err != nil {
				clear(d.hdrs)
				return outbox.Event{}, d.rowError(rel, row, p, fmt.Errorf("header column: %w", err))
			}
			h.Value = buf[start:len(buf):len(buf)] // never nil: buf is not
		}
		d.hdrs = append(d.hdrs, h)
	}
	if headers.present() {
		raw, err := jsonText(headers, rel.oid[roleHeaders])
		if err == nil {
			d.hdrs, _, err = d.appendHeaders(d.hdrs, buf, raw)
		}
		if err != nil {
			clear(d.hdrs)
			return outbox.Event{}, d.rowError(rel, row, rel.pos[roleHeaders], err)
		}
	}
	if err := d.checkCloudEventsHeaders(fixed); err != nil {
		clear(d.hdrs)
		return outbox.Event{}, d.rowError(rel, row, rel.pos[roleHeaders], err)
	}
	ev.Headers = make([]outbox.Header, len(d.hdrs))
	copy(ev.Headers, d.hdrs)
	clear(d.hdrs) // do not keep this event's bytes alive
	d.index++
	return ev, nil
}

// appendID appends the outbox id in text form: an integer in decimal, a
// uuid in its canonical form, text as it is (never empty). Text format is
// checked (an integer column sends digits, but a corrupt stream must not
// put anything else in the id header); binary format is a big-endian
// integer of the column's width, or a uuid's 16 bytes.
func appendID(buf []byte, v value, oid uint32) ([]byte, error) {
	switch v.kind {
	case valueText:
		switch oid {
		case oidInt8, oidInt4, oidInt2:
			if _, err := strconv.ParseInt(string(v.data), 10, 64); err != nil {
				return buf, fmt.Errorf("id %s is not an integer", quoteShort(v.data))
			}
		case oidUUID:
			if len(v.data) != 36 {
				return buf, fmt.Errorf("id %s is not a uuid", quoteShort(v.data))
			}
		}
		if len(v.data) == 0 {
			return buf, errors.New("empty id")
		}
		return append(buf, v.data...), nil
	case valueBinary:
		want := 8
		switch oid {
		case oidInt4:
			want = 4
		case oidInt2:
			want = 2
		case oidUUID:
			want = 16
		case oidText, oidVarchar:
			if len(v.data) == 0 {
				return buf, errors.New("empty id")
			}
			return append(buf, v.data...), nil
		}
		switch {
		case len(v.data) != want:
		case want == 16:
			return appendUUID(buf, v.data), nil
		case want == 8:
			return strconv.AppendInt(buf, int64(binary.BigEndian.Uint64(v.data)), 10), nil
		case want == 4:
			return strconv.AppendInt(buf, int64(int32(binary.BigEndian.Uint32(v.data))), 10), nil
		case want == 2:
			return strconv.AppendInt(buf, int64(int16(binary.BigEndian.Uint16(v.data))), 10), nil
		}
		return buf, fmt.Errorf("binary %s id is %d bytes, want %d", describeType(oid), len(v.data), want)
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
func appendKey(buf []byte, v value, oid uint32) ([]byte, error) {
	if v.kind == valueBinary {
		switch oid {
		case oidUUID:
			if len(v.data) == 16 {
				return appendUUID(buf, v.data), nil
			}
		case oidInt8, oidInt4, oidInt2: // the key is the decimal text, as in text format
			out, err := appendID(buf, v, oid)
			if err != nil {
				return buf, fmt.Errorf("key: %w", err)
			}
			return out, nil
		}
	}
	return append(buf, v.data...), nil
}

// appendPayload appends the payload bytes: bytea decoded from its text form
// to raw bytes, jsonb in binary format without its version byte, anything
// else as sent.
func appendPayload(buf []byte, v value, oid uint32) ([]byte, error) {
	switch {
	case oid == oidBytea && v.kind == valueText:
		return appendBytea(buf, v.data)
	case oid == oidJSONB && v.kind == valueBinary:
		raw, err := jsonText(v, oid)
		if err != nil {
			return buf, err
		}
		return append(buf, raw...), nil
	}
	return append(buf, v.data...), nil
}

// jsonText returns the JSON text of a json or jsonb value: binary jsonb is
// a version byte (1) followed by the text.
func jsonText(v value, oid uint32) ([]byte, error) {
	if oid != oidJSONB || v.kind != valueBinary {
		return v.data, nil
	}
	if len(v.data) == 0 || v.data[0] != 1 {
		return nil, errors.New("binary jsonb value without version 1 prefix")
	}
	return v.data[1:], nil
}
