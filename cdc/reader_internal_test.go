package cdc

import (
	"testing"
	"time"
)

// Regression: the pacer's short read deadline was kept after the pacer
// stopped asking for one (at a transaction's Commit), so it expired and
// woke the reader once more per transaction for nothing.
func TestRenewWakeReplacesAShortDeadline(t *testing.T) {
	r := &reader{nextStatus: time.Now().Add(time.Hour)}
	defer r.wake.stop()
	steps := []struct {
		wait  time.Duration
		renew bool
	}{
		{confirmInterval, true},  // first deadline
		{confirmInterval, false}, // kept
		{pacerTxWait, true},      // shortened for the pacer
		{pacerTxWait, false},     // kept while it has not passed
		{confirmInterval, true},  // the pacer is done: replaced at once
		{confirmInterval, false}, // kept
	}
	for i, s := range steps {
		if got := r.renewWake(t.Context(), s.wait); got != s.renew {
			t.Fatalf("step %d (wait %v): renewed %v, want %v", i, s.wait, got, s.renew)
		}
	}
}
