package layout

import (
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/outbox"
)

// Layout makes the records of one replication stream's rows and emitted
// messages, in order, as its Columns say. It remembers each table's
// description, checked against the mapping once per description. It is
// not safe for concurrent use.
type Layout struct {
	cols   Columns
	format format            // what a row's record looks like
	tables map[uint32]*table // by relation id
	// msgSource is the outbox.SourceHeader's value for table-less events; "" without Columns.Source.
	msgSource string

	// The place of the row or message being laid out.
	commitTime time.Time
	commitLSN  outbox.LSN
	index      int

	hdrs    []outbox.Header   // scratch for the headers of the event being built
	scratch []byte            // scratch: the topic being built
	names   map[string]string // interned topics and header keys
	types   *pgtype.Map       // pgx's codecs, for a timestamp column; made when first needed
}

// table is a table's description checked against the mapping: where its
// rows keep the parts of a record.
type table struct {
	*outbox.Relation // the description it was checked against
	plan             // where the parts of a record are
	// unusable lists why rows of this table cannot become records (missing
	// columns, unusable types); nil for a usable table.
	unusable error
	// source is the outbox.SourceHeader's value for the table's rows:
	// Columns.Source + "/" + table; "" without Columns.Source.
	source string
}

// Bounds of the string interning in Layout.names.
const (
	maxInterned    = 4096
	maxInternedLen = 256
)

// New returns a Layout for tables with the given columns. Empty names in
// cols mean their defaults (see [DefaultColumns]).
func New(cols Columns) *Layout {
	l := &Layout{
		cols:   cols.WithDefaults(),
		tables: make(map[uint32]*table),
		names:  make(map[string]string),
	}
	if l.cols.MessagePrefix != "" {
		l.msgSource = l.source(messageTable(l.cols.MessagePrefix))
	}
	l.format = plain{}
	if l.cols.Debezium != nil {
		l.format = debezium{}
	}
	return l
}

// A format makes the record of one row of a checked table, its bytes in
// one allocation: the default layout (plain.go; with CloudEvents
// attributes when Columns.CloudEvents is set) or Debezium's
// (debezium.go). A new record layout is a new format, chosen in New.
type format interface {
	record(l *Layout, t *table, row []outbox.Value) (outbox.Event, error)
}

type plain struct{}

func (plain) record(l *Layout, t *table, row []outbox.Value) (outbox.Event, error) {
	return l.buildEvent(t, row)
}

type debezium struct{}

func (debezium) record(l *Layout, t *table, row []outbox.Value) (outbox.Event, error) {
	return l.buildDebeziumEvent(t, row)
}

// Row makes the record of an inserted row: an Event whose bytes are its
// own (capacity-limited, so appending to one never overwrites another),
// or a *outbox.RowError carrying what could be read of a row that cannot
// become one (a table without usable outbox columns, a NULL topic, ...).
// Value is the payload: jsonb/json/text as sent (text form); bytea decoded
// from its text form (\x hex, or escape) to raw bytes; nil when NULL (a
// tombstone).
func (l *Layout) Row(r *outbox.Row) (outbox.Event, error) {
	l.commitTime, l.commitLSN, l.index = r.CommitTime, r.CommitLSN, r.Index
	t := l.tables[r.Relation.ID]
	if t == nil || t.Relation != r.Relation {
		t = l.describe(r.Relation)
	}
	if t.unusable != nil {
		return outbox.Event{}, l.rowError(t, r.Values, -1, t.unusable)
	}
	return l.format.record(l, t, r.Values)
}

// describe checks a table's new description against the mapping. A table
// without usable outbox columns (or one an ALTER TABLE made unusable) is
// remembered with its problems: its rows become *outbox.RowErrors, which
// the pipeline stops on or dead-letters.
func (l *Layout) describe(rel *outbox.Relation) *table {
	p, errs := locate(rel.Table, rel.Columns, l.cols)
	t := &table{Relation: rel, plan: p, unusable: errors.Join(errs...),
		source: l.source(SourceName(rel.Schema) + "." + SourceName(rel.Name))}
	l.tables[rel.ID] = t
	return t
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
func (l *Layout) source(table string) string {
	if l.cols.Source == "" {
		return ""
	}
	return l.cols.Source + "/" + table
}

// appendSource appends the source header's value to buf and l.hdrs (which
// holds the id header): nothing when source is "".
func (l *Layout) appendSource(buf []byte, source string) []byte {
	if source == "" {
		return buf
	}
	start := len(buf)
	buf = append(buf, source...)
	l.hdrs = append(l.hdrs, outbox.Header{Key: outbox.SourceHeader, Value: buf[start:len(buf):len(buf)]})
	return buf
}

// intern returns b as a string, reusing an earlier string with the same
// bytes: topics and header keys repeat from row to row.
func (l *Layout) intern(b []byte) string {
	if s, ok := l.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(l.names) < maxInterned && len(s) <= maxInternedLen {
		l.names[s] = s
	}
	return s
}
