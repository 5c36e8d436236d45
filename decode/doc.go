// Package decode turns the bytes of pgoutput messages into what they say.
//
// It owns the parser of outboxd's pipeline: the bytes of one pgoutput
// message (the WALData of one XLogData message, protocol version 1, no
// streaming) become a [Message]: the Begin of a transaction; a Row for
// each committed insert into a table of the publication (its relation as
// the last Relation message described it, its column values, its place in
// the transaction); an Emitted message for each logical decoding message
// under the events' prefix (table-less events); or the Commit that ends
// the transaction with the end LSN that may be confirmed once every event
// before it is acknowledged. What a row or message becomes as a Kafka
// record is not decided here: package layout does that, so a new record
// layout or encoding is no edit here. Everything else (updates, deletes,
// truncates, types, origins, other messages) is recognised, checked for
// well-formedness and ignored. [Snapshot] frames rows read with SELECT
// (a backfill) as the inserts the stream would have sent, so a backfilled
// row and a streamed one are one contract by construction.
//
// Invariants:
//   - Pure: no I/O, no goroutines, no logging, no package-level mutable state.
//   - Never panics, on any input: lengths are checked before every read, and
//     a message that is truncated or carries trailing bytes is an error.
//   - The one place that checks the transaction frame: a Begin inside a
//     transaction, an Insert, a transactional message or a Commit outside
//     one is an error.
//   - Copies nothing on the hot path: a Row's values and an Emitted
//     message's content alias the decoded bytes, valid until the next
//     Decode (the caller reuses its buffer); what outlives that is copied
//     by package layout. Relations are copied and kept.
//   - Places are unique and increasing: each Row and Emitted message of a
//     transaction takes the next index under the transaction's commit LSN.
//   - Errors say what was being decoded and name the table and the column.
package decode
