// Package publish owns the Kafka side: a franz-go producer that is
// idempotent, waits for all in-sync replicas (acks=all) and keeps per-partition
// order across retries. Its Producer is package pump's at-least-once Sink.
//
// Invariant: a record is never dropped. Every Publish ends in exactly one
// call of its done callback: nil once Kafka acknowledged the record, or the
// error that made it fail for good (too large for outboxd's limit or the
// broker's, invalid or unknown topic, authorization, or an Abort after an
// earlier failure). Retriable errors, including a broker that is down, are
// retried without limit; they are never reported as failures. A loss Kafka
// reports afterwards (data loss detection) is logged at Error and counted.
//
// Its TxnProducer is the exactly-once Sink. Invariant: it resumes only
// after a position its own transactional id committed: the progress
// reader counts records of committed Kafka transactions that carry the
// header naming that id (readProgress says what else it ignores), and it
// refuses an event addressed to its progress topic.
package publish
