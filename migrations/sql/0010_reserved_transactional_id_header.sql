-- outboxd: default table only (skipped with migrate --own-table)
-- Refuse, at insert time, a row whose headers set
-- "outboxd-transactional-id": an exactly-once publisher trusts a progress
-- record that carries its own transactional id in that header, and a row
-- of another exactly-once pipeline publishing to its progress topic could
-- forge one. run refuses such a row too.
-- NOT VALID, as in 0007: the next migration validates the existing rows.
SET lock_timeout = '10s';
SELECT pg_catalog.set_config('outboxd.table', {{.TableLiteral}}, false);
DO $migration$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                   WHERE conrelid = current_setting('outboxd.table')::regclass AND conname = 'outboxd_headers_not_transactional_id') THEN
        EXECUTE format($sql$ALTER TABLE %s ADD CONSTRAINT outboxd_headers_not_transactional_id
            CHECK (headers IS NULL OR NOT headers ? 'outboxd-transactional-id') NOT VALID$sql$,
            current_setting('outboxd.table')::regclass);
    END IF;
END
$migration$;
RESET lock_timeout;
