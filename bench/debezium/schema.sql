-- Outbox table in the layout Debezium's Outbox Event Router expects by
-- default (column names id, aggregatetype, aggregateid, type, payload), and
-- the publication the connector streams from (publication.autocreate.mode =
-- disabled: the connector never creates or alters it). Inserts only: the
-- router treats an outbox as append-only and drops deletes anyway.
CREATE TABLE IF NOT EXISTS public.outbox_debezium (
	id uuid PRIMARY KEY,
	aggregatetype text NOT NULL,
	aggregateid text NOT NULL,
	type text NOT NULL,
	payload jsonb,
	created_at timestamptz DEFAULT now()
);

CREATE PUBLICATION dbz_outbox FOR TABLE public.outbox_debezium WITH (publish = 'insert');
