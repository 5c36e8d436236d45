-- outboxd: default table only (skipped with migrate --own-table)
-- Check the rows written before 0007's constraints existed, as 0004 does.
ALTER TABLE {{.Table}} VALIDATE CONSTRAINT outboxd_topic_not_reserved;
ALTER TABLE {{.Table}} VALIDATE CONSTRAINT outboxd_headers_not_reserved;
