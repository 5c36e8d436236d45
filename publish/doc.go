// Package publish owns the Kafka side: a franz-go producer that is
// idempotent, waits for all in-sync replicas (acks=all) and keeps per-partition
// order across retries.
//
// Invariant: a record is never dropped. Every Publish ends in exactly one
// call of its done callback: nil once Kafka acknowledged the record, or the
// error that made it fail for good (too large, invalid or unknown topic,
// authorization, or the context given to Publish ending). Retriable errors,
// including a broker that is down, are retried without limit; they are
// never reported as failures.
package publish
