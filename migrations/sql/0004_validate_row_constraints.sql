-- outboxd: default table only (skipped with migrate --own-table)
-- Check the rows written before the constraints existed. VALIDATE takes a
-- SHARE UPDATE EXCLUSIVE lock: inserts go on while it scans. It fails when
-- an existing row breaks a constraint: such a row could never have been
-- published; migrate then says how to find it.
ALTER TABLE {{.Table}} VALIDATE CONSTRAINT outboxd_topic_valid;
ALTER TABLE {{.Table}} VALIDATE CONSTRAINT outboxd_headers_valid;
