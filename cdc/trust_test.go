package cdc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc"
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
