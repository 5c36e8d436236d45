-- outboxd: default table only (skipped with migrate --own-table)
-- Refuse, at insert time, a row addressed to a topic no record may name: a
-- Kafka internal topic (a name beginning with "__") or outboxd.progress,
-- where exactly-once publishers keep their progress (a row there could
-- forge it). run refuses these too, and also its own --progress-topic and
-- --dead-letter-topic when they are set to other names. And a row whose
-- headers set "outboxd.source": outboxd sets it, naming the record's
-- source (consumers dedupe on source and id).
-- NOT VALID, as in 0003: the next migration validates the existing rows.
SET lock_timeout = '10s';
SELECT pg_catalog.set_config('outboxd.table', {{.TableLiteral}}, false);
DO $migration$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                   WHERE conrelid = current_setting('outboxd.table')::regclass AND conname = 'outboxd_topic_not_reserved') THEN
        EXECUTE format($sql$ALTER TABLE %s ADD CONSTRAINT outboxd_topic_not_reserved
            CHECK (left(topic, 2) <> '__' AND topic <> 'outboxd.progress') NOT VALID$sql$,
            current_setting('outboxd.table')::regclass);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                   WHERE conrelid = current_setting('outboxd.table')::regclass AND conname = 'outboxd_headers_not_reserved') THEN
        EXECUTE format($sql$ALTER TABLE %s ADD CONSTRAINT outboxd_headers_not_reserved
            CHECK (headers IS NULL OR NOT headers ? 'outboxd.source') NOT VALID$sql$,
            current_setting('outboxd.table')::regclass);
    END IF;
END
$migration$;
RESET lock_timeout;
