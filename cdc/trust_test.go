package cdc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/harness/testenv"
)

// Regression (issue 37): a predicate recorded in outboxd_slots as a pending
// backfill was run as stored, without the checks --backfill-where gets
// (and with the slot dropped first). A recorded predicate that the flag
// would refuse stops run naming outboxd_slots, and the slot is kept.
func TestStoredBackfillPredicateCheckedLikeTheFlag(t *testing.T) {
	t.Parallel()
	b := newBed(t, "", nil)
	// As a role that may write outboxd_slots could leave it.
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO outboxd_slots (slot_name, system_identifier, timeline, created_by, backfill_where)
		VALUES ($1, (SELECT system_identifier::text FROM pg_control_system()), 1, 'run --create-slot', E' \t')`, b.slot); err != nil {
		t.Fatal(err)
	}
	err := b.start(cdc.Config{CreateSlot: true}).wait(time.Minute)
	if !cdc.IsPermanent(err) || !strings.Contains(err.Error(), "outboxd_slots") || !strings.Contains(err.Error(), "blank") {
		t.Fatalf("Run with a blank predicate recorded as a pending backfill = %v, want a permanent error naming outboxd_slots and the rule", err)
	}
	if !b.slotExists(t) {
		t.Error("the slot was dropped for a backfill whose recorded predicate fails the check")
	}
}

// Regression (issue 37, review): a pending backfill recorded in
// outboxd_slots was run while another role could write that table, so a
// role with UPDATE on it could have run a predicate of its own choosing in
// outboxd's snapshot (and had the slot dropped for it). Run refuses it,
// naming the role, and leaves the slot.
func TestPendingBackfillRefusedWhileOthersMayWriteTheCatalog(t *testing.T) {
	t.Parallel()
	b := newBed(t, "", nil)
	role := testenv.Name(t, "intruder")
	for _, q := range []string{`CREATE ROLE ` + role, `GRANT UPDATE ON outboxd_slots TO ` + role,
		`INSERT INTO outboxd_slots (slot_name, system_identifier, timeline, created_by, backfill_where)
		 VALUES ('` + b.slot + `', (SELECT system_identifier::text FROM pg_control_system()), 1, 'run --create-slot', 'true')`} {
		if _, err := b.pool.Exec(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = b.pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = b.pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	err := b.start(cdc.Config{CreateSlot: true}).wait(time.Minute)
	if !cdc.IsPermanent(err) || !strings.Contains(err.Error(), role) || !strings.Contains(err.Error(), "revoke") {
		t.Fatalf("Run with another role able to write outboxd_slots = %v, want a permanent refusal naming the role", err)
	}
	if !b.slotExists(t) {
		t.Error("the slot was dropped for a backfill recorded while another role could write outboxd_slots")
	}
}
