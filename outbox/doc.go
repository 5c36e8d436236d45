// Package outbox is outboxd's domain: an outbox row on its way to Kafka
// ([Event]), the transaction boundaries that frame events in the stream
// ([Begin], [Commit]) and the WAL positions that order them ([LSN]).
//
// Package decode produces these values from pgoutput; the pump and the
// sinks (package publish) consume them. This package is a leaf: it imports
// nothing of PostgreSQL or Kafka, holds no state and does no I/O.
//
// Invariants of the values:
//   - An Event's position in the stream is (CommitLSN, Index): unique and
//     increasing in commit order, also where several events share one
//     commit LSN. An LSN alone is not a resume point.
//   - Commit.EndLSN is the only position ever confirmed to PostgreSQL.
package outbox
