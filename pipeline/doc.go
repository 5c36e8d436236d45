// Package pipeline assembles and runs one outbox pipeline: one slot's
// replication stream (cdc), through the schema-registry stage when a
// format needs one (registry), to the pump and one sink, the
// at-least-once producer or the exactly-once transactional one (publish),
// with the WAL monitor and the heartbeat beside them (slot). It owns the
// wiring between those stages (each hands on through an outbox.Stage, the
// stream sees the pump as its cdc.Window), running them, the rules that
// span them, and the one [Status] value that reports them all; each
// stage owns its own work.
//
// A Pipeline is built from one [Config] by [New], which does no I/O, and
// runs with Run(ctx) until ctx ends (a graceful stop: the open transaction
// finishes, Kafka acknowledges, the slot is confirmed) or a permanent
// error. A process may build and run many, each with its own Config. A
// paused one (Config.Paused) runs only the WAL monitor: it reads nothing
// from its slot, which keeps its confirmed position.
//
// Invariants:
//   - Config.Validate reports every problem at once, each a *field.Error
//     (package lib/field) naming the component field ("Stream.ReadLinger")
//     so that a command can report it under its own name for the
//     setting, the stages' own and the rules across stages (the Debezium
//     layout with a schema format); New refuses a Config that does not
//     validate, so a library user gets what the command gets.
//   - Every goroutine of a Pipeline belongs to Run's errgroup; Run returns
//     once all of them returned, and closes the Kafka client. The stages
//     after the stream outlive it (its drain at a stop needs them) and
//     stop once it returned; any stage failing stops the stream.
//   - Status reads every stage at one call, from any goroutine, and
//     changes nothing.
//   - Nothing is published before the stream identified its server: the
//     exactly-once sink's progress key names the server the records come
//     from, as their own replication connection identified it.
//   - Kafka out of reach never stops a Pipeline: its records wait, the
//     slot is not confirmed past them, and Reach says so.
package pipeline
