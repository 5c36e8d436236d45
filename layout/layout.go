package layout

import (
	"errors"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/outbox"
)

// Layout makes the records of one replication stream's rows and emitted
// messages, in order, as its Columns say: rows in the Shape Columns.Shape
// names, messages as envelopes (envelope.go). It remembers each table's
// description, checked against the mapping and the shape once per
// description. It is not safe for concurrent use.
type Layout struct {
	cols   Columns // as given to New: a table's own mapping is over these
	b      Builder
	shape  Shape
	msgs   envelope
	tables map[uint32]*Table // by relation id
}

// Table is a table's description checked against the mapping and its
// layout's shape: where its rows keep the parts of a record.
type Table struct {
	*outbox.Relation // the description it was checked against
	plan             // where the parts of a record are
	// unusable lists why rows of this table cannot become records (missing
	// columns, unusable types); nil for a usable table.
	unusable error
	// source is the outbox.SourceHeader's value for the table's rows:
	// Columns.Source + "/" + table; "" without Columns.Source.
	source string
}

// val is the value of the role's column in row; absent (kind 0) when the
// table has no such column.
func (t *Table) val(row []outbox.Value, role int) outbox.Value {
	if p := t.pos[role]; p >= 0 {
		return row[p]
	}
	return outbox.Value{}
}

// New returns a Layout for tables with the given columns. Empty names in
// cols mean their defaults (see [DefaultColumns]).
func New(cols Columns) *Layout {
	d := cols.WithDefaults()
	return &Layout{
		cols:   cols,
		b:      Builder{cols: d, names: make(map[string]string)},
		shape:  d.shape(),
		msgs:   newEnvelope(d),
		tables: make(map[uint32]*Table),
	}
}

// Row makes the record of an inserted row: an Event whose bytes are its
// own (capacity-limited, so appending to one never overwrites another),
// or a *outbox.RowError carrying what could be read of a row that cannot
// become one (a table without usable outbox columns, a NULL topic, ...).
// Value is the payload: jsonb/json/text as sent (text form); bytea decoded
// from its text form (\x hex, or escape) to raw bytes; nil when NULL (a
// tombstone).
func (l *Layout) Row(r *outbox.Row) (outbox.Event, error) {
	l.b.at(r.CommitTime, r.CommitLSN, r.Index)
	t := l.tables[r.Relation.ID]
	if t == nil || t.Relation != r.Relation {
		t = l.describe(r.Relation)
	}
	if t.unusable != nil {
		return outbox.Event{}, l.b.rowError(t, r.Values, -1, t.unusable)
	}
	return l.shape.Record(&l.b, t, r.Values)
}

// Emitted makes the record of a logical decoding message under the
// events' prefix (Columns.MessagePrefix): an Event, or a
// *outbox.RowError for a message that cannot become one (among them
// every non-transactional message, which is sent even when its
// transaction rolls back). The Event's bytes are its own.
func (l *Layout) Emitted(m *outbox.Emitted) (outbox.Event, error) {
	l.b.at(m.CommitTime, m.CommitLSN, m.Index)
	return l.msgs.record(&l.b, m)
}

// describe checks a table's new description against the mapping and the
// shape. A table without usable outbox columns (or one an ALTER TABLE
// made unusable) is remembered with its problems: its rows become
// *outbox.RowErrors, which the pipeline stops on or dead-letters.
func (l *Layout) describe(rel *outbox.Relation) *Table {
	t := check(rel, l.cols.For(rel.Schema, rel.Name).WithDefaults(), l.shape)
	t.source = source(l.b.cols, SourceName(rel.Schema)+"."+SourceName(rel.Name))
	l.tables[rel.ID] = t
	return t
}

// check checks a table against the mapping cols (with defaults) and the
// shape: the mapping itself, the roles' columns (locate), then the
// shape's own needs.
func check(rel *outbox.Relation, cols Columns, shape Shape) *Table {
	t := &Table{Relation: rel}
	if err := cols.Validate(); err != nil {
		t.unusable = fmt.Errorf("table %s: %w", rel.Table, err)
		return t
	}
	var errs []error
	t.plan, errs = locate(rel.Table, rel.Columns, cols)
	errs = append(errs, shape.Check(t)...)
	t.unusable = errors.Join(errs...)
	return t
}

// ValidateTable checks that a table has the outbox columns with usable types.
// table is schema-qualified; want is the mapping for it (Columns.For).
// Returns an error naming the table and the column (missing, or its type
// name/oid and what is accepted). Reports every problem
// at once (errors.Join). Empty names in want mean their defaults; the headers
// column may be absent.
func ValidateTable(table string, cols []outbox.Column, want Columns) error {
	want = want.WithDefaults()
	return check(&outbox.Relation{Table: table, Columns: cols}, want, want.shape()).unusable
}

// SourceName is a name as it stands in a source (Columns.Source and the
// outbox.SourceHeader): as it is when it is a plain lower-case SQL identifier,
// else double-quoted as SQL quotes it ("a.b", "Orders", "x/y"), so that
// the parts of a source never run together: schema a.b with table c and
// schema a with table b.c are two sources.
func SourceName(name string) string {
	plain := name != ""
	for i, c := range name {
		if !(c == '_' || c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '$')) {
			plain = false
			break
		}
	}
	if plain {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// source is the outbox.SourceHeader's value for the events of table (see
// Columns.Source): "" without a Source.
func source(cols Columns, table string) string {
	if cols.Source == "" {
		return ""
	}
	return cols.Source + "/" + table
}
