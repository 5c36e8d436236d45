-- outboxd: default table only (skipped with migrate --own-table)
-- Check the rows written before 0010's constraint existed, as 0008 does.
ALTER TABLE {{.Table}} VALIDATE CONSTRAINT outboxd_headers_not_transactional_id;
