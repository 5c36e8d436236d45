// Package chaos proves outboxd's delivery guarantees under faults: it runs
// concurrent outbox writers against a real PostgreSQL, one or two `outboxd
// run` child processes against a real Kafka, injects faults (kill -9,
// SIGTERM restarts, broker restarts, PostgreSQL restarts, walsender
// terminations, standby takeovers) while writing, and then checks what an
// independent consumer reads from the topic against what was committed.
//
// Check is pure and is the verdict: lost, leaked and reordered events are
// failures; duplicates are reported (at-least-once) with their bound.
package chaos
