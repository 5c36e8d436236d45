package decode

import (
	"fmt"

	"github.com/outboxd/outboxd/outbox"
)

// decodeRelation parses a Relation message (body after the type byte):
//
//	Int32 relation id, String namespace, String name, Int8 replica identity,
//	Int16 column count, then per column: Int8 flags, String name,
//	Int32 type OID, Int32 type modifier.
//
// pglogrepl's RelationMessage.Decode reads past the end of a truncated
// message, so the message is parsed here.
func (d *Decoder) decodeRelation(body []byte) (Message, error) {
	r := reader{buf: body}
	id, err := r.uint32("relation id")
	if err != nil {
		return Message{}, fmt.Errorf("decoding relation: %w", err)
	}
	schema, name, cols, err := parseRelationBody(&r)
	if err != nil {
		return Message{}, fmt.Errorf("decoding relation %d: %w", id, err)
	}
	// A new value each time: a layout checks each description of a table
	// again, so an ALTER TABLE that breaks its mapping is noticed.
	d.rels[id] = &outbox.Relation{ID: id, Schema: schema, Name: name, Table: schema + "." + name, Columns: cols}
	return Message{Kind: KindIgnored}, nil
}

// parseRelationBody parses a Relation message after its relation id.
func parseRelationBody(r *reader) (schema, name string, cols []outbox.Column, err error) {
	ns, err := r.cstring("namespace")
	if err != nil {
		return "", "", nil, err
	}
	rel, err := r.cstring("relation name")
	if err != nil {
		return "", "", nil, err
	}
	if len(ns) == 0 {
		// pgoutput sends an empty namespace for pg_catalog.
		ns = []byte("pg_catalog")
	}
	schema, name = string(ns), string(rel)
	if _, err := r.uint8("replica identity"); err != nil {
		return "", "", nil, err
	}
	n, err := r.uint16("column count")
	if err != nil {
		return "", "", nil, err
	}
	// Each column takes at least 10 bytes: do not allocate for columns
	// that cannot be there.
	if int(n)*10 > r.left() {
		return "", "", nil, truncatedError(fmt.Sprintf("%d columns", n), r.pos, uint64(n)*10, r.left())
	}
	cols = make([]outbox.Column, n)
	for i := range cols {
		if cols[i], err = parseRelationColumn(r); err != nil {
			return "", "", nil, fmt.Errorf("column %d: %w", i, err)
		}
	}
	if err := r.done(); err != nil {
		return "", "", nil, err
	}
	return schema, name, cols, nil
}

// parseRelationColumn parses one column of a Relation message.
func parseRelationColumn(r *reader) (outbox.Column, error) {
	if _, err := r.uint8("flags"); err != nil {
		return outbox.Column{}, err
	}
	name, err := r.cstring("name")
	if err != nil {
		return outbox.Column{}, err
	}
	oid, err := r.uint32("type")
	if err != nil {
		return outbox.Column{}, err
	}
	mod, err := r.uint32("type modifier")
	if err != nil {
		return outbox.Column{}, err
	}
	return outbox.Column{Name: string(name), TypeOID: oid, TypeMod: int32(mod)}, nil
}
