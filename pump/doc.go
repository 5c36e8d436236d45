// Package pump moves decoded outbox events to a sink and the sink's
// acknowledgments back into the checkpoint. It owns the in-flight window
// (records and bytes), the transaction bookkeeping, the failure latch and
// the dead-letter route.
//
// The reader (package cdc) hands it one decoded message at a time, in
// stream order, with Apply; the pump counts each event into the open
// transaction of a checkpoint.Tracker and hands the transaction's events to
// a Sink (package publish) together at its commit (a large transaction in
// batches, so that it still streams); the sink's done callbacks acknowledge
// them there. The
// reader reads the confirmable position back with Flushed.
//
// Invariants:
//   - Flushed never passes a record the sink has not reported durable: only
//     a transaction end all of whose records, and all earlier ones, are
//     done without error (or dead-lettered, when that is configured).
//   - In-flight records and their bytes stay within the window: Apply blocks
//     (until its context ends, having taken nothing) while it is full. A
//     record larger than the byte cap is admitted only alone.
//   - A record the sink fails for good is never skipped: without a
//     dead-letter topic the first failure latches, every later Apply
//     returns it, the sink is told to abort what it still buffers, and Run
//     returns it. With a dead-letter topic the record goes there (as a
//     reference without its value if it is too large even for that) and
//     only then counts as done.
package pump
