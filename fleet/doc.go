// Package fleet runs many named pipelines in one process, and spreads them
// over the replicas of a deployment with no coordinator of its own: the
// replication slot is the lease (PostgreSQL lets one walsender hold a
// slot), and ranks only decide who tries first.
//
// A [Fleet] is built from a [Config] (this replica's identity, the delays)
// and one [Spec] per pipeline; Run runs a [Member] per pipeline until ctx
// ends, and Reload replaces the set of pipelines while it runs.
//
// Invariants:
//   - A pipeline never stops another, and never stops the process: a
//     Member whose pipeline fails (a poison row, a lost slot, a database
//     that refuses it) logs why, says so in its Status, and starts it
//     again after a growing backoff; the others go on. Run returns only
//     when ctx ends, once every pipeline drained and confirmed. A Single
//     fleet (`run` without a pipelines file: one pipeline, one wiring)
//     returns its pipeline's failure instead, for whatever supervises the
//     process to restart it.
//   - Correctness never depends on the spreading rule: two replicas that
//     disagree on ranks only wait on each other's slot. Ranks
//     (rendezvous hashing of the pipeline's name over the replicas) make
//     the preferred replica take a pipeline at once and the others wait
//     their rank times Config.RankDelay, before the first try and before
//     taking a slot another replica released.
//   - A pipeline changes hands only through a graceful stop (drain, wait
//     for Kafka, confirm, release): when a replica ranked first for a
//     pipeline stands by while one ranked after it streams, it asks for
//     the pipeline back with a notification on the pipeline's database,
//     and the holder hands it over. A holder that died is replaced as
//     any standby replaces it, at-least-once.
//   - A Reload leaves a pipeline whose Spec did not change (same
//     Fingerprint) running untouched; a removed one drains and releases
//     its slot; a changed one drains before its new settings start. A
//     pause is such a change: the paused pipeline (Config.Paused) then
//     reads nothing and only watches its slot, until a Reload resumes it.
//   - Every goroutine belongs to Run's errgroup.
//   - A Member's Status is its pipeline's (pipeline.Status), with its own
//     word while the pipeline does not run (waiting, backing off,
//     stopped) and the failures it restarted it after.
package fleet
