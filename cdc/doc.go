// Package cdc owns the replication connection. Its Streamer runs one
// replication session after another: it checks the publication and the slot
// (package slot), identifies the server, starts pgoutput replication at the
// watermark, and runs a reader, the one goroutine that touches the
// connection: it receives messages with deadlines, decodes them (package
// decode), lays rows out as records (package layout), hands them in order
// to the first stage of its pipeline (an outbox.Stage: the schema-registry
// stage or the pump), answers keepalives and sends the Window's watermark
// back as the standby status. The Window (the pump) is run beside the
// Streamer by package pipeline; the stream only starts, reads and settles
// it (Start, Flushed, Drain, Withdraw). Before the first session a
// slot.Provisioner sets the slot up; cdc gives it the backfill
// (backfill.go), whose rows go through the same stages. A Replayer
// (outboxd replay, replay.go) reads rows still in an outbox table in the
// backfill's order and hands them to the same stages, never touching a
// slot; its invariants are on its type.
//
// Invariants:
//   - Only one goroutine touches the replication connection.
//   - The flush position sent to PostgreSQL is the Window's watermark and
//     nothing else: a transaction end LSN all of whose records (and all
//     earlier ones) the sink acknowledged, or, while nothing is in flight, the
//     server's keepalive WAL end. Write, flush and apply are set explicitly.
//   - A standby status goes out at least every StatusInterval and whenever
//     the server asks, also while the pump waits for room (Kafka slow).
//   - A new session starts at the later of the slot's confirmed position and
//     what this process confirmed before, and only on the same server (system
//     identifier and timeline): after a broken connection only the
//     transaction that was open is sent again.
//   - A permanent error (bad row without a dead-letter topic, publication or
//     slot missing, a record Kafka refuses) stops Run with that error; the
//     slot is not advanced past it. Connection loss is retried with backoff.
package cdc
