// Package migrations owns outboxd's SQL: the default outbox table, the
// constraints that refuse rows outboxd could never publish, and the
// publication, embedded in the binary and applied in version order.
//
// Invariant: applying is idempotent. Each migration runs in its own
// transaction together with the row recording it in outboxd_migrations, under
// an advisory lock, so concurrent or repeated runs apply each version exactly
// once per target (table and publication). The statements themselves are also
// written to be harmless when repeated (IF NOT EXISTS), so a DBA may apply
// the printed SQL by hand.
//
// Names from flags enter the SQL only as quoted identifiers or string
// literals (package sqlquote); the dollar-quoted DO blocks are fixed text
// that reads the names from settings, so no name can end one early.
package migrations
