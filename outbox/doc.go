// Package outbox is outboxd's domain, the vocabulary its stages share: a
// row as the stream sent it ([Row], [Emitted], [Relation], [Value]), an
// outbox row on its way to Kafka ([Event]) or one that cannot become a
// record ([RowError]), the transaction boundaries that frame events in
// the stream ([Begin], [Commit], [Change]) and the WAL positions that
// order them ([LSN], [Position]).
//
// Package decode produces rows from pgoutput, package layout turns them
// into events, and the pump and the sinks (package publish) consume
// those. This package is a leaf: it imports nothing of PostgreSQL or
// Kafka, holds no state and does no I/O.
//
// Invariants of the values:
//   - An Event's position in the stream is (CommitLSN, Index): unique and
//     increasing in commit order, also where several events share one
//     commit LSN. An LSN alone is not a resume point.
//   - A position confirmed to PostgreSQL is either a Commit.EndLSN (its
//     transaction's events and every earlier one acknowledged) or, while
//     nothing is in flight and no transaction is open, the WAL end a
//     keepalive reported: never a position inside a transaction.
//   - A Row's values and an Emitted message's content alias the stream's
//     buffer and are valid only until the next message is decoded; an
//     Event's and a RowError's bytes are their own.
package outbox
