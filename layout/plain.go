package layout

import "github.com/outboxd/outboxd/outbox"

// plain is the default shape: a row of the default outbox table, or of
// any table whose columns Columns maps, becomes a record with the topic
// column's value (or the topic template's) as its topic, the key and
// payload columns' bytes as key and value, and as headers the outbox id,
// the source, the header columns and the headers column's members (see
// Builder.record). It has no options and needs nothing of a table beyond
// the mapping's roles.
type plain struct{}

func (plain) Check(*Table) []error { return nil }

func (plain) Record(b *Builder, t *Table, row []outbox.Value) (outbox.Event, error) {
	return b.record(t, row, nil, nil)
}
