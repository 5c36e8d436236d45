-- The publication outboxd streams: inserts into the outbox table only.
-- CREATE PUBLICATION has no IF NOT EXISTS, hence the DO block.
DO $migration$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = {{.PublicationLiteral}}) THEN
        CREATE PUBLICATION {{.Publication}} FOR TABLE {{.Table}} WITH (publish = 'insert');
    END IF;
END
$migration$;
