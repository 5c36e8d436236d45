-- outboxd: default table only (skipped with migrate --own-table)
-- Refuse, at insert time, every row outboxd could never publish. Such a row
-- would otherwise reach the WAL and stop the publisher at it on every
-- restart (the slot cannot move past a row without skipping it), so the
-- application gets the error in its own transaction instead:
--   topic:   a valid Kafka topic name: 1 to 249 characters of [a-zA-Z0-9._-],
--            not "." or "..";
--   headers: NULL or a JSON object without an "id" key (the id header is the
--            outbox id).
-- NOT VALID: adding the constraints takes a brief lock and does not scan the
-- table; the next migration validates the existing rows under a lock that
-- lets inserts continue. lock_timeout keeps the brief lock from queueing
-- the application's inserts behind a long-running transaction.
SET lock_timeout = '10s';
SELECT pg_catalog.set_config('outboxd.table', {{.TableLiteral}}, false);
DO $migration$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                   WHERE conrelid = current_setting('outboxd.table')::regclass AND conname = 'outboxd_topic_valid') THEN
        EXECUTE format($sql$ALTER TABLE %s ADD CONSTRAINT outboxd_topic_valid
            CHECK (length(topic) BETWEEN 1 AND 249 AND topic ~ '^[a-zA-Z0-9._-]+$' AND topic NOT IN ('.', '..')) NOT VALID$sql$,
            current_setting('outboxd.table')::regclass);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                   WHERE conrelid = current_setting('outboxd.table')::regclass AND conname = 'outboxd_headers_valid') THEN
        EXECUTE format($sql$ALTER TABLE %s ADD CONSTRAINT outboxd_headers_valid
            CHECK (headers IS NULL OR (jsonb_typeof(headers) = 'object' AND NOT headers ? 'id')) NOT VALID$sql$,
            current_setting('outboxd.table')::regclass);
    END IF;
END
$migration$;
RESET lock_timeout;
