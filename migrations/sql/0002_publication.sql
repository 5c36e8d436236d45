-- The publication outboxd streams: inserts into the outbox table only (for a
-- partitioned table, every partition's, published as the table itself).
-- CREATE PUBLICATION has no IF NOT EXISTS, hence the DO block. Its text is
-- fixed: the names reach it through two settings, set here from SQL string
-- literals, and are quoted by format() inside it. No name is ever spliced
-- into a dollar-quoted block, so no name can end it early.
SELECT pg_catalog.set_config('outboxd.publication', {{.PublicationLiteral}}, false),
       pg_catalog.set_config('outboxd.table', {{.TableLiteral}}, false);
DO $migration$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = current_setting('outboxd.publication')) THEN
        EXECUTE format('CREATE PUBLICATION %I FOR TABLE %s WITH (publish = %L{{if .Partitioned}}, publish_via_partition_root = true{{end}})',
                       current_setting('outboxd.publication'), current_setting('outboxd.table')::regclass, 'insert');
    END IF;
END
$migration$;
