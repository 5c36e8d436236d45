-- Hand-overs between the replicas of a fleet (run --config with
-- --replicas), recorded where only outboxd's role writes: any role of the
-- database may NOTIFY, so a replica hands a pipeline over, or takes a
-- released one at once, only when outboxd_slots holds a fresh request of
-- another replica. handover_at/handover_by: the replica ranked first for
-- the slot asks for it back; released_at/released_to: the replica that
-- let the slot go gracefully names the one ranked next.
-- Shared by every outbox table of the database, like outboxd_slots.
ALTER TABLE outboxd_slots
    ADD COLUMN IF NOT EXISTS handover_at timestamptz NULL,
    ADD COLUMN IF NOT EXISTS handover_by integer     NULL,
    ADD COLUMN IF NOT EXISTS released_at timestamptz NULL,
    ADD COLUMN IF NOT EXISTS released_to integer     NULL;
