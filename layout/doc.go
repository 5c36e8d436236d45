// Package layout decides what a row becomes as a Kafka record.
//
// It owns the record layouts: a decoded row (an outbox.Row: its table's
// description and column values, as package decode makes it) or an
// emitted table-less message becomes an outbox.Event (topic, key, value, headers, timestamp, its
// place in the stream) or an *outbox.RowError naming what is wrong. Its
// face is two methods of [Layout]: Row and Emitted.
//
// A row's record has a [Shape], chosen by name (Columns.Shape, one of
// [Shapes]), each a type of its own in a file of its own with its
// options:
//   - plain, the default outbox table or any table whose columns
//     [Columns] maps: id, topic column or topic template, key, payload, a
//     JSON headers column, header columns, a timestamp column (plain.go);
//   - CloudEvents attributes in the Kafka binding's binary mode on top of
//     it (cloudevents.go);
//   - Debezium's outbox EventRouter's records (debezium.go,
//     debezium_json.go).
//
// Table-less events, a JSON envelope in a logical decoding message, have
// a shape of their own (envelope.go). The byte work every shape shares
// (topic, id, key, payload, the id and source headers, the row's own
// headers, row errors) is the [Builder]'s (builder.go, values.go,
// headers.go); the mapping's roles and their types are columns.go and
// mapping.go.
//
// A new shape is a new file here, its name in shape.go, and no edit in
// decode or in the other shapes. Each table's description is checked
// against the mapping and the shape once, when the stream describes it
// (again after an ALTER TABLE), so a table without usable outbox columns
// (see [ValidateTable], which slot uses to check a publication before
// streaming) makes each of its rows a RowError.
//
// Invariants:
//   - Pure: no I/O, no goroutines, no logging, no package-level mutable state.
//   - Never panics, on any row or message content.
//   - Copies every byte it keeps: a row's values alias the stream's
//     buffer, so no Event or RowError field aliases them; an Event's byte
//     slices are capacity-limited and carved from one allocation.
//   - Every record's first header is the outbox id ("id"); with
//     [Columns.Source] the source header (outbox.SourceHeader) follows:
//     source + id is the idempotency key. The row's own headers come after
//     outboxd's and may not take their names.
//   - No record names a topic it must not: a Kafka internal topic ("__"
//     prefix) or one of [Columns.ReservedTopics] (outboxd's progress and
//     dead-letter topics), whatever the layout, table-less messages too.
//   - Errors name the table, the column and, once it is known, the outbox
//     id (see outbox.RowError).
package layout
