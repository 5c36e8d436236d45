package decode

import (
	"errors"
	"fmt"
)

// relation is what a Relation message says about a table in the publication,
// reduced to what decoding an insert needs.
type relation struct {
	table   string   // schema-qualified
	columns []Column // in tuple order
	layout           // where the parts of a record are
	// unusable lists why rows of this table cannot become records (missing
	// columns, unusable types); nil for a usable table.
	unusable error
	// source is the SourceHeader's value for the table's rows:
	// Columns.Source + "/" + table; "" without Columns.Source.
	source string
}

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
	table := schema + "." + name
	// A table without usable outbox columns (or one an ALTER TABLE made
	// unusable) is remembered with its problems: its inserts become
	// *RowErrors, which the pipeline stops on or dead-letters.
	l, errs := locate(table, cols, d.cols)
	d.rels[id] = &relation{table: table, columns: cols, layout: l, unusable: errors.Join(errs...), source: d.source(SourceName(schema) + "." + SourceName(name))}
	return Message{Kind: KindIgnored}, nil
}

// parseRelationBody parses a Relation message after its relation id.
func parseRelationBody(r *reader) (schema, name string, cols []Column, err error) {
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
	cols = make([]Column, n)
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
func parseRelationColumn(r *reader) (Column, error) {
	if _, err := r.uint8("flags"); err != nil {
		return Column{}, err
	}
	name, err := r.cstring("name")
	if err != nil {
		return Column{}, err
	}
	oid, err := r.uint32("type")
	if err != nil {
		return Column{}, err
	}
	mod, err := r.uint32("type modifier")
	if err != nil {
		return Column{}, err
	}
	return Column{Name: string(name), TypeOID: oid, TypeMod: int32(mod)}, nil
}
