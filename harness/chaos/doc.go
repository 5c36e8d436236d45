// Package chaos proves outboxd's delivery guarantees under faults: it runs
// concurrent outbox writers against a real PostgreSQL, one or two `outboxd
// run` child processes against a real Kafka, injects faults (kill -9,
// SIGTERM restarts, broker restarts, PostgreSQL restarts, walsender
// terminations, standby takeovers) while writing, and then checks what an
// independent consumer reads from the topic against what was committed.
//
// Check is pure and is the verdict: lost, leaked and reordered events are
// failures; duplicates are reported (at-least-once) with their bound.
//
// RunFleet is the same for many pipelines over several replicas of
// `outboxd run --config FILE`: a database, slot and topic per pipeline
// (every other one exactly-once), writers on every pipeline, and faults
// of their own (a replica killed or stopped, then back; a walsender; a
// database out of reach; a poison row; a transaction coordinator's
// death). Each pipeline gets its own verdict, its duplicates attributed to
// the faults that hit it; takeovers and the spread over the replicas are
// read from each replica's GET /pipelines.
package chaos
