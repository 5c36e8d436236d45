package outbox

import "time"

// Column is one column of a table, as the catalog or a Relation message
// describes it.
type Column struct {
	Name    string
	TypeOID uint32
	// TypeMod is the column's type modifier (atttypmod): -1 when it has
	// none, e.g. 3 for timestamptz(3).
	TypeMod int32
}

// Relation is a table of the publication as the stream describes it: a
// new Relation value each time the stream describes the table again (after
// an ALTER TABLE, in each session), so a Relation's identity says which
// description a row was sent under.
type Relation struct {
	ID      uint32 // the stream's relation id, the table's OID
	Schema  string
	Name    string
	Table   string   // Schema + "." + Name, as written in errors and Event.Table
	Columns []Column // in tuple order
}

// The formats of a column Value, as pgoutput's TupleData marks them.
const (
	ValueNull   = 'n' // NULL: Data is nil
	ValueText   = 't' // the type's text form
	ValueBinary = 'b' // the type's binary form
)

// Value is one column value of a row as the stream sent it. Data aliases
// the stream's buffer: it is valid only until the next message is read.
type Value struct {
	Format byte // ValueNull, ValueText or ValueBinary; 0 for a column the table lacks
	Data   []byte
}

// Present reports whether the value is there and not NULL.
func (v Value) Present() bool { return v.Format == ValueText || v.Format == ValueBinary }

// Place is where a row or message stands in the stream: its transaction's
// commit LSN and time, and its index among the transaction's events. A
// message outside any transaction has none.
type Place struct {
	CommitLSN  LSN
	CommitTime time.Time
	Index      int
}

// Row is an inserted row of a table of the publication, not yet a record:
// package layout turns it into an Event. Values alias the stream's buffer.
type Row struct {
	Relation *Relation
	Values   []Value // one per Relation.Columns
	Place
}

// Emitted is a logical decoding message under the events' prefix
// (pg_logical_emit_message), not yet a record: package layout turns it
// into an Event. Content aliases the stream's buffer.
type Emitted struct {
	LSN     LSN // where the message is in the WAL: its id
	Prefix  string
	Content []byte
	// Transactional: emitted as part of its transaction (sent only if it
	// commits). A non-transactional message is sent at once, even when its
	// transaction rolls back.
	Transactional bool
	// InTxn: the stream was inside a transaction when it came, so it has
	// a Place there. A non-transactional message outside any transaction
	// has none: it is standalone.
	InTxn bool
	Place
}
