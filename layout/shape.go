package layout

import "github.com/outboxd/outboxd/outbox"

// Shape is one record layout: what the rows of a table become as Kafka
// records. Each shape is a type of its own in a file of its own, with its
// options (plain.go, cloudevents.go, debezium.go); table-less messages
// have theirs (envelope.go). A Layout finds each table's columns for the
// mapping's roles (id, topic, key, payload, headers, timestamp, the
// topic template, the header columns) whatever the shape, then asks the
// shape.
//
// A shape writes no bytes by hand that the Builder writes: the topic,
// the id, key and payload as columns hold them, the id and source
// headers, the row's own headers. A new shape is a new file here, a name
// below and its case in shape; no edit in decode, and none in the other
// shapes.
type Shape interface {
	// Check checks a table whose roles were found (t's plan) against
	// what the shape needs besides, noting in t what it needs to make
	// records, and returns every problem.
	Check(t *Table) []error
	// Record makes the record of one row of a usable table it checked,
	// its bytes carved by b from one allocation, or a *outbox.RowError.
	Record(b *Builder, t *Table, row []outbox.Value) (outbox.Event, error)
}

// The shapes, as Columns.Shape names them.
const (
	ShapePlain       = "plain"       // the default: topic, key, payload and headers as the columns hold them
	ShapeCloudEvents = "cloudevents" // plain, with CloudEvents attributes as headers (Columns.CloudEvents)
	ShapeDebezium    = "debezium"    // Debezium's outbox EventRouter's records (Columns.Debezium)
)

// Shapes lists every shape's name, the default first.
func Shapes() []string { return []string{ShapePlain, ShapeCloudEvents, ShapeDebezium} }

// shape is the Shape c (with defaults, valid) names.
func (c Columns) shape() Shape {
	switch c.Shape {
	case ShapeCloudEvents:
		return cloudEvents{opts: c.CloudEvents}
	case ShapeDebezium:
		return debezium{opts: c.Debezium, noKey: c.NoKey}
	}
	return plain{}
}
