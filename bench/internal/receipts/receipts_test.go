package receipts

import (
	"testing"
	"time"
)

// The report counts what arrived since the last reset only, with the
// quantiles of one latency a transaction.
func TestTallyCountsSinceItsReset(t *testing.T) {
	var tl Tally
	tl.Add(10, time.Second) // before the reset: the warm-up's
	tl.Reset()
	for i := 1; i <= 100; i++ {
		tl.Add(3, time.Duration(i)*time.Millisecond)
	}
	got := tl.Report(7)
	want := Report{Slots: 7, Transactions: 100, Inserts: 300, P50ms: 51, P99ms: 100, Maxms: 100}
	if got != want {
		t.Errorf("report = %+v, want %+v", got, want)
	}
	tl.Reset()
	if got := tl.Report(7); got != (Report{Slots: 7}) {
		t.Errorf("report after a reset = %+v, want nothing counted", got)
	}
}
