-- outboxd: default table only (skipped with migrate --own-table)
-- The default outbox table. The application inserts one row per event in the
-- same transaction as its business write; outboxd publishes it from the WAL.
-- There is no published_at column: nothing is ever updated, so publishing
-- writes no WAL and leaves no dead tuples. Rows may be deleted (or the table
-- partitioned and old partitions dropped) once committed: the WAL, not the
-- table, is what outboxd reads (outboxd prune).
{{- if .Partitioned}}
-- migrate --partitioned: partitioned by day on created_at. The primary key
-- of a partitioned table must include the partition key. The DEFAULT
-- partition takes a row whose day has no partition yet, so an insert
-- never fails; outboxd migrate and outboxd prune create the days ahead.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id           bigserial   NOT NULL,
    aggregate_id uuid        NOT NULL,
    topic        text        NOT NULL,
    payload      jsonb       NOT NULL,
    headers      jsonb       NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE TABLE IF NOT EXISTS {{.DefaultPartition}} PARTITION OF {{.Table}} DEFAULT;
{{- else}}
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id           bigserial   PRIMARY KEY,
    aggregate_id uuid        NOT NULL,
    topic        text        NOT NULL,
    payload      jsonb       NOT NULL,
    headers      jsonb       NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
{{- end}}
