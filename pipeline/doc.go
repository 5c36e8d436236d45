// Package pipeline assembles and runs one outbox pipeline: one slot's
// replication stream (cdc) through the pump to one sink, the at-least-once
// producer or the exactly-once transactional one (publish), with the WAL
// monitor and the heartbeat beside it (slot). It owns the wiring between
// those stages and the rules that span them; each stage owns its own.
//
// A Pipeline is built from one [Config] by [New], which does no I/O, and
// runs with Run(ctx) until ctx ends (a graceful stop: the open transaction
// finishes, Kafka acknowledges, the slot is confirmed) or a permanent
// error. A process may build and run many, each with its own Config.
//
// Invariants:
//   - Config.Validate reports every problem at once, each a *FieldError
//     naming the component field ("Stream.ReadLinger") so that a command
//     can report it under its own name for the setting; New refuses a
//     Config that does not validate.
//   - Every goroutine of a Pipeline belongs to Run's errgroup; Run returns
//     once all of them returned, and closes the Kafka client.
//   - Nothing is published before the stream identified its server: the
//     exactly-once sink's progress key names the server the records come
//     from, as their own replication connection identified it.
//   - Kafka out of reach never stops a Pipeline: its records wait, the
//     slot is not confirmed past them, and Reach says so.
package pipeline
