// Package idempotent is the consumer half of the outbox pattern: it reads
// outboxd's records with a franz-go consumer group and hands each one to
// your handler at most once per consumer, in the same PostgreSQL
// transaction as the handler's own writes, however often Kafka delivers it.
//
// Invariants:
//
//   - A record's key is unique across sources: by default (SourceAndID)
//     its source, the outboxd.source header outboxd writes after the id
//     header (system identifier/database/schema.table), then U+001F, then
//     its outbox id, the "id" header. So two outbox tables, or two
//     databases with bigserial ids, feeding one consumer never
//     deduplicate each other's events away. A record without a source
//     (from an outboxd older than the header) is keyed by its id alone.
//     After the upgrade from the id alone, processed_keys holds bare ids:
//     a record with a source whose bare id was recorded before the
//     consumer recorded its first key with a source is skipped as a
//     duplicate of a record processed before the upgrade (see
//     Config.NoLegacyKeys for the risk this leaves until the TTL has
//     passed, and how to turn it off).
//   - A record's key is recorded in processed_keys in the same
//     transaction as the handler's writes, and the handler runs only
//     when that recording inserted the row: a redelivered record (an
//     outboxd restart, a rebalance, a replay from the beginning) finds
//     its key and is skipped. Two consumers
//     handed the same key at once serialize on a transaction-scoped
//     advisory lock on it, so exactly one of them inserts the key (see
//     Store for why a lock: processed_keys is partitioned by day, and a
//     unique constraint cannot span partitions). The transaction is READ
//     COMMITTED whatever default_transaction_isolation says, so the
//     insert, a statement after the lock, sees the key the lock's previous
//     holder committed (under REPEATABLE READ the snapshot would predate
//     the lock, and both would run the handler).
//   - Offsets are committed to Kafka only after the database transaction
//     committed, and rebalances are held off (kgo.BlockRebalanceOnPoll)
//     while a polled batch is processed, so a revoked partition never has
//     work in flight and an offset never passes unprocessed work. A crash
//     between the database commit and the offset commit redelivers records
//     whose keys are already recorded: they are skipped.
//   - A record without a key, or that its handler keeps refusing, is
//     never skipped silently: after MaxAttempts refusals the consumer
//     stops (Run returns the error; the default) or, with a dead-letter
//     topic, produces it there with headers saying why and records its
//     key. A handler panic is a refusal like any other: its transaction,
//     key included, is rolled back.
//   - An outage never dead-letters a healthy record: transient failures
//     (the database restarting or unreachable, a connection lost, a
//     serialization failure or deadlock, Kafka unreachable, a network
//     error or timeout) are retried with backoff, each retry logged at
//     Warn, until Run's context ends, and never count toward MaxAttempts,
//     also when the handler returned them. When the context ends during
//     such retries, Run returns nil with the record uncommitted: the next
//     Run starts with it. A permanent failure outside the handler (say,
//     a permission denied on processed_keys) is not the record's fault
//     either: Run stops with it, dead-letter topic or not.
//   - With a Decoder (Config.Decoder), the handler sees a record's value
//     and key decoded from a schema registry's wire format (outboxd's
//     --value-format and --key-format) back to the row's JSON; the key is
//     the headers' as without, and a dead letter keeps the bytes as they
//     came. A registry that does not answer is an outage like any other.
//   - processed_keys never needs a DELETE: it is partitioned by day on
//     processed_at, and Maintain (run by Consumer.Run every hour, and by
//     `outboxd processed-keys`) creates the coming days' partitions and
//     drops those older than the TTL.
package idempotent
