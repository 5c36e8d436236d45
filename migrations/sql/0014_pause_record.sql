-- A pipeline paused by an operator (run's paused setting, issue 53): set
-- by the paused pipeline's WAL check while no one streams the slot,
-- cleared by the check of a pipeline that finds the slot streamed again,
-- so that outboxd status says since when a slot is paused and not lost
-- or forgotten. Shared by every outbox table of the database, like
-- outboxd_slots.
ALTER TABLE outboxd_slots
    ADD COLUMN IF NOT EXISTS paused_at timestamptz NULL;
