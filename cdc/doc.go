// Package cdc owns the replication connection. Its Streamer runs one
// replication session after another: it checks the publication and the slot
// (package slot), identifies the server, starts pgoutput replication at the
// watermark, and runs a reader, the one goroutine that touches the
// connection: it receives messages with deadlines, decodes them (package
// decode), lays rows out as records (package layout), hands them in order
// to a Consumer (package pump's Pump), answers
// keepalives and sends the Watermark back as the standby status. Before the
// first session a slot.Provisioner sets the slot up; cdc gives it the
// backfill (backfill.go), whose rows go through the same pump.
//
// Invariants:
//   - Only one goroutine touches the replication connection.
//   - The flush position sent to PostgreSQL is the pump's watermark and
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
