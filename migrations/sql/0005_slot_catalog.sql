-- What outboxd knows about the replication slots it created: a slot that
-- is recorded here and missing from the server was lost (dropped, or left
-- behind on the old primary by a failover), and the rows committed since
-- are in no slot. migrate and run refuse to create such a slot again
-- silently; run --create-slot --backfill-where recovers (see README).
-- acknowledged_commit_time is the commit time up to which Kafka
-- acknowledged every record, kept by run at each WAL check (every 30 s by
-- default) for the recovery command's suggested predicate.
-- Shared by every outbox table of the database, like outboxd_migrations.
CREATE TABLE IF NOT EXISTS outboxd_slots (
    slot_name                text        PRIMARY KEY,
    system_identifier        text        NOT NULL,
    timeline                 integer     NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now(),
    created_by               text        NOT NULL,
    consistent_point         pg_lsn      NULL,
    backfill_where           text        NULL,
    backfill_done_at         timestamptz NULL,
    backfill_rows            bigint      NULL,
    acknowledged_commit_time timestamptz NULL
);
