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
	var vals [numRoles]value
	for i := range rel.columns {
		kind, data, err := nextValue(&r)
		if err != nil {
			return Message{}, rel.insertError(fmt.Errorf("column %q: %w", rel.columns[i].Name, err))
		}
		if kind == valueUnchanged {
			return Message{}, rel.insertError(fmt.Errorf("column %q: unchanged TOAST value in an insert", rel.columns[i].Name))
		}
		if role := rel.role[i]; role >= 0 {
			vals[role] = value{kind: kind, data: data}
		}
	}
	if err := r.done(); err != nil {
		return Message{}, rel.insertError(err)
	}
	if rel.unusable != nil {
		return Message{}, d.rowError(rel, &vals, -1, rel.unusable)
	}
	ev, err := d.buildEvent(rel, &vals)
	if err != nil {
		return Message{}, err
	}
	return Message{Kind: KindEvent, Event: ev}, nil
}

func (rel *relation) insertError(err error) error {
	return fmt.Errorf("decoding insert into %s: %w", rel.table, err)
}

// rowError describes a row that cannot become a record, with what could be
// read of it (copied: the row's bytes alias the message). role is the
// column at fault, -1 for the table as a whole.
func (d *Decoder) rowError(rel *relation, v *[numRoles]value, role int, err error) error {
	e := &RowError{Table: rel.table, Err: err, CommitTime: d.commitTime, CommitLSN: d.commitLSN, Index: d.index}
	d.index++ // the row keeps its place among the transaction's events
	if role >= 0 {
		e.Column = rel.columns[rel.pos[role]].Name
	}
	if rel.pos[roleID] >= 0 {
		e.ID, err = parseID(v[roleID], rel.oid[roleID])
		e.HasID = err == nil
	}
	if t := v[roleTopic]; rel.pos[roleTopic] >= 0 && t.present() {
		e.Topic = string(t.data)
	}
	if k := v[roleKey]; rel.pos[roleKey] >= 0 && k.present() {
		e.Key = appendKey(nil, k, rel.oid[roleKey])
	}
	if p := v[rolePayload]; rel.pos[rolePayload] >= 0 && p.present() {
		var perr error
		if e.Value, perr = appendPayload(nil, p, rel.oid[rolePayload]); perr != nil {
			e.Value = append([]byte(nil), p.data...) // as sent
		}
	}
	return e
}

// buildEvent turns the outbox column values of a well-formed insert into an
// Event. All its bytes (id header, key, value, header values) are carved
// from one allocation.
func (d *Decoder) buildEvent(rel *relation, v *[numRoles]value) (outbox.Event, error) {
	id, err := parseID(v[roleID], rel.oid[roleID])
	if err != nil {
		return outbox.Event{}, d.rowError(rel, v, roleID, err)
	}
	topic := v[roleTopic]
	if !topic.present() {
		return outbox.Event{}, d.rowError(rel, v, roleTopic, errors.New("null topic"))
	}
	if len(topic.data) == 0 {
		return outbox.Event{}, d.rowError(rel, v, roleTopic, errors.New("empty topic"))
	}
	ev := outbox.Event{Table: rel.table, ID: id, Topic: d.intern(topic.data), CommitTime: d.commitTime,
		CommitLSN: d.commitLSN, Index: d.index}

	key, payload, headers := v[roleKey], v[rolePayload], v[roleHeaders]
	// One allocation holds all: decoded values are at most as long as their
	// text, except in rare cases (a binary uuid key, invalid UTF-8 replaced in
	// an escaped header string) where append grows buf; the slices carved
	// before stay valid either way.
	buf := make([]byte, 0, 20+len(key.data)+len(payload.data)+len(headers.data))
	buf = strconv.AppendInt(buf, id, 10)
	idValue := buf[:len(buf):len(buf)]

	if key.present() {
		start := len(buf)
		buf = appendKey(buf, key, rel.oid[roleKey])
		ev.Key = buf[start:len(buf):len(buf)]
	}
	if payload.present() {
		start := len(buf)
		buf, err = appendPayload(buf, payload, rel.oid[rolePayload])
		if err != nil {
			return outbox.Event{}, d.rowError(rel, v, rolePayload, err)
		}
		ev.Value = buf[start:len(buf):len(buf)]
	}

	d.hdrs = append(d.hdrs[:0], outbox.Header{Key: "id", Value: idValue})
	if headers.present() {
		raw, err := jsonText(headers, rel.oid[roleHeaders])
		if err == nil {
			d.hdrs, _, err = d.appendHeaders(d.hdrs, buf, raw)
		}
		if err != nil {
			clear(d.hdrs)
			return outbox.Event{}, d.rowError(rel, v, roleHeaders, err)
		}
	}
	ev.Headers = make([]outbox.Header, len(d.hdrs))
	copy(ev.Headers, d.hdrs)
	clear(d.hdrs) // do not keep this event's bytes alive
	d.index++
	return ev, nil
}

// parseID reads the outbox id: decimal text, or a big-endian integer of the
// column's width in binary format.
func parseID(v value, oid uint32) (int64, error) {
	switch v.kind {
	case valueText:
		id, err := strconv.ParseInt(string(v.data), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("id %s is not an integer", quoteShort(v.data))
		}
		return id, nil
	case valueBinary:
		want := 8
		switch oid {
		case oidInt4:
			want = 4
		case oidInt2:
			want = 2
		}
		switch {
		case len(v.data) != want:
		case want == 8:
			return int64(binary.BigEndian.Uint64(v.data)), nil
		case want == 4:
			return int64(int32(binary.BigEndian.Uint32(v.data))), nil
		case want == 2:
			return int64(int16(binary.BigEndian.Uint16(v.data))), nil
		}
		return 0, fmt.Errorf("binary %s id is %d bytes, want %d", describeType(oid), len(v.data), want)
	}
	return 0, errors.New("null id")
}

// appendKey appends the aggregate id in text form.
func appendKey(buf []byte, v value, oid uint32) []byte {
	if v.kind == valueBinary && oid == oidUUID && len(v.data) == 16 {
		const hexDigits = "0123456789abcdef"
		for i, b := range v.data {
			if i == 4 || i == 6 || i == 8 || i == 10 {
				buf = append(buf, '-')
			}
			buf = append(buf, hexDigits[b>>4], hexDigits[b&0xf])
		}
		return buf
	}
	return append(buf, v.data...)
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
