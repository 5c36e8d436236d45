-- outboxd_emit, again (0006, 0009): it also refuses headers that set
-- "outboxd-transactional-id", as the default table's constraint of 0010
-- does (an exactly-once publisher's progress records carry it).
--
-- outboxd_emit: a table-less event (run --message-prefix). It emits a
-- transactional logical decoding message whose content is the envelope
-- outboxd reads ({"topic", "key", "headers", "payload"}), so the event is
-- published in commit order with the transaction's other events, and never
-- when the transaction rolls back. Nothing is written to a table: nothing
-- to clean up, and nothing to backfill from after a lost slot.
-- Like the default table's constraints, it refuses at call time what
-- outboxd could never publish: a topic that is not a valid Kafka topic
-- name, headers that are not a JSON object or set "id" (the id header is
-- the message's LSN, which the function returns).
-- prefix must be run's --message-prefix (default outboxd.event).
-- Shared by every outbox table of the database, like outboxd_slots.
CREATE OR REPLACE FUNCTION outboxd_emit(topic text, payload jsonb, key text DEFAULT NULL, headers jsonb DEFAULT NULL,
                                        prefix text DEFAULT 'outboxd.event')
RETURNS pg_lsn
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $function$
BEGIN
    IF topic IS NULL OR length(topic) NOT BETWEEN 1 AND 249 OR topic !~ '^[a-zA-Z0-9._-]+$' OR topic IN ('.', '..') THEN
        RAISE EXCEPTION 'outboxd_emit: topic % is not a valid Kafka topic name (1 to 249 characters of [a-zA-Z0-9._-], not "." or "..")',
            coalesce(quote_literal(topic), 'NULL') USING ERRCODE = 'check_violation';
    END IF;
    IF left(topic, 2) = '__' OR topic = 'outboxd.progress' THEN
        RAISE EXCEPTION 'outboxd_emit: topic % is reserved (a Kafka internal topic, or where outboxd keeps its exactly-once progress)',
            quote_literal(topic) USING ERRCODE = 'check_violation';
    END IF;
    IF prefix IS NULL OR prefix = '' THEN
        RAISE EXCEPTION 'outboxd_emit: prefix must be run''s --message-prefix, not %', coalesce(quote_literal(prefix), 'NULL')
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF headers IS NOT NULL AND (jsonb_typeof(headers) <> 'object' OR headers ? 'id' OR headers ? 'outboxd.source' OR headers ? 'outboxd-transactional-id') THEN
        RAISE EXCEPTION 'outboxd_emit: headers must be a JSON object without an "id", "outboxd.source" or "outboxd-transactional-id" member, not %', headers
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN pg_logical_emit_message(true, prefix,
        jsonb_build_object('topic', topic, 'key', key, 'headers', headers, 'payload', payload)::text);
END
$function$;
