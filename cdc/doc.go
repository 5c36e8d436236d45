// Package cdc owns the replication connection: it checks the publication and
// the slot, starts pgoutput replication from the slot's confirmed position,
// reads WAL messages with deadlines, decodes them (package decode), hands the
// events to a Publisher in commit order, and reports the acknowledgment
// watermark (package checkpoint) back to PostgreSQL as the standby status.
//
// Invariants:
//   - Only one goroutine touches the replication connection.
//   - The flush position sent to PostgreSQL is the checkpoint watermark and
//     nothing else: a transaction end LSN all of whose records (and all
//     earlier ones) Kafka acknowledged, or, while nothing is in flight, the
//     server's keepalive WAL end. Write, flush and apply are set explicitly.
//   - A standby status goes out at least every StatusInterval and whenever
//     the server asks, also while the Publisher is blocked on a slow Kafka.
//   - A permanent error (bad row, publication missing, record Kafka
//     rejects) stops Run with that error; the slot is not advanced past it.
//     Connection loss is retried with backoff and resumes from the watermark.
package cdc
