-- outboxd: default table only (skipped with migrate --own-table)
-- The default outbox table. The application inserts one row per event in the
-- same transaction as its business write; outboxd publishes it from the WAL.
-- There is no published_at column: nothing is ever updated, so publishing
-- writes no WAL and leaves no dead tuples. Rows may be deleted (or the table
-- partitioned and old partitions dropped) once committed: the WAL, not the
-- table, is what outboxd reads.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id           bigserial   PRIMARY KEY,
    aggregate_id uuid        NOT NULL,
    topic        text        NOT NULL,
    payload      jsonb       NOT NULL,
    headers      jsonb       NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
