-- Replays (outboxd replay, issue 53): each re-publishes the rows of one
-- outbox table that a selection names, page by page in the order they
-- were written. A replay is known by its name; its row says what it
-- selects (so that a second run of the same name resumes only the same
-- selection), the last row that selection held when it started (rows
-- written later are the stream's), and how far Kafka acknowledged it:
-- the page and the last row of that page (its ordering column's and id
-- column's values as text; order_null when the ordering column was NULL).
-- Shared by every outbox table of the database, like outboxd_slots.
CREATE TABLE IF NOT EXISTS outboxd_replays (
    replay_name   text        PRIMARY KEY,
    table_name    text        NOT NULL,
    selection     text        NOT NULL,
    upper_order   text        NULL,
    upper_null    boolean     NOT NULL DEFAULT false,
    upper_id      text        NULL,
    page          bigint      NOT NULL DEFAULT 0,
    after_order   text        NULL,
    after_null    boolean     NOT NULL DEFAULT false,
    after_id      text        NULL,
    rows_done     bigint      NOT NULL DEFAULT 0,
    rows_total    bigint      NOT NULL DEFAULT 0,
    started_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz NULL
);
