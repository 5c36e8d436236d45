package decode

import (
	"errors"
	"fmt"

	"github.com/outboxd/outboxd/outbox"
)

// decodeInsert parses an Insert message (body after the type byte):
// Int32 relation id, Byte1('N'), TupleData. It is the hot path: the tuple is
// walked in place and its values alias the message; nothing is copied.
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
		return Message{}, insertError(rel, errors.New("insert outside a transaction"))
	}
	kind, err := r.uint8("tuple kind")
	if err != nil {
		return Message{}, insertError(rel, err)
	}
	if kind != 'N' {
		return Message{}, insertError(rel, fmt.Errorf("tuple kind %q, want 'N'", kind))
	}
	n, err := r.uint16("column count")
	if err != nil {
		return Message{}, insertError(rel, err)
	}
	if int(n) != len(rel.Columns) {
		return Message{}, insertError(rel, fmt.Errorf("tuple has %d columns, the relation message described %d", n, len(rel.Columns)))
	}
	row := d.row[:0]
	for i := range rel.Columns {
		kind, data, err := nextValue(&r)
		if err != nil {
			return Message{}, insertError(rel, fmt.Errorf("column %q: %w", rel.Columns[i].Name, err))
		}
		if kind == valueUnchanged {
			return Message{}, insertError(rel, fmt.Errorf("column %q: unchanged TOAST value in an insert", rel.Columns[i].Name))
		}
		row = append(row, outbox.Value{Format: kind, Data: data})
	}
	d.row = row
	if err := r.done(); err != nil {
		return Message{}, insertError(rel, err)
	}
	return Message{Kind: KindRow, Row: outbox.Row{Relation: rel, Values: row, Place: d.place()}}, nil
}

func insertError(rel *outbox.Relation, err error) error {
	return fmt.Errorf("decoding insert into %s: %w", rel.Table, err)
}
