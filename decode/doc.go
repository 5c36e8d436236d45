// Package decode turns pgoutput messages into outbox events.
//
// It owns the pure step of outboxd's pipeline: the bytes of one pgoutput
// message (the WALData of one XLogData message, protocol version 1, no
// streaming) become a [Message]: the Begin of a transaction, one
// outbox.Event per committed insert into an outbox table (with its position
// in the stream, the commit LSN and its index in the transaction), or the
// Commit that ends the transaction with the end LSN that may be confirmed
// once every event before it is acknowledged. Relation messages are
// remembered so that inserts can be mapped to the parts of a record
// ([Columns]: the default outbox table, or a mapping of another table's
// columns, a topic template, header columns and a timestamp column); each
// Relation is checked against the mapping again, so an ALTER TABLE that
// breaks it is noticed at the next insert; a table
// without usable outbox columns (see [ValidateTable]) is remembered as
// unusable and each insert into it is a [*RowError]. With
// [Columns.MessagePrefix], a transactional logical decoding message under
// that prefix carrying a JSON envelope is an event too (table-less events,
// see message.go). Everything else (updates, deletes, truncates, types,
// origins, other messages) is recognised, checked for well-formedness and
// ignored. With [Columns.Source] (the server's system identifier and
// database, which cdc sets), every record carries a [SourceHeader] right
// after the id header: source + id is its idempotency key, unique across
// tables, databases and clusters. A backfilled row ([Snapshot]) gets the
// same header as a streamed row of its table.
//
// Invariants:
//   - Pure: no I/O, no goroutines, no logging, no package-level mutable state.
//   - Never panics, on any input: lengths are checked before every read, and
//     a message that is truncated or carries trailing bytes is an error.
//   - The one place that checks the transaction frame: a Begin inside a
//     transaction, an Insert or a Commit outside one is an error.
//   - Copies every byte it keeps: the caller reuses the WALData buffer, so no
//     Event or RowError field aliases the input.
//   - Errors say what was being decoded and name the table, the column and,
//     once it is known, the outbox id (see [RowError]).
//   - No record names a topic it must not: a Kafka internal topic ("__"
//     prefix) or one of [Columns.ReservedTopics] (outboxd's progress and
//     dead-letter topics), whatever the layout, table-less messages too.
package decode
