// Package checkpoint decides which WAL position may be confirmed to
// PostgreSQL: the acknowledgment watermark.
//
// A Tracker follows transactions in commit order. Each transaction counts its
// records not yet acknowledged by Kafka; acknowledgments may arrive in any
// order (records of different partitions complete independently). Flushed is
// the end LSN of the newest transaction such that it and every earlier one
// are committed and fully acknowledged.
//
// Invariant: Flushed never passes a transaction with an unacknowledged
// record, and only ever returns a transaction end LSN (for a standalone
// logical decoding message, which is in no transaction, the pump commits a
// transaction of its own ending just past it), or a server WAL end
// reported by Idle while nothing at all was in flight. It never moves
// backwards.
//
// Bounded: transactions without records that commit behind an incomplete
// one are folded into the one before them, so the queue grows with the
// records in flight, not with the transactions read while Kafka stalls.
//
// The package is pure: no I/O, no goroutines. A Tracker is safe for
// concurrent use, because acknowledgments arrive on the producer's callback
// goroutines while the replication goroutine adds transactions.
package checkpoint
