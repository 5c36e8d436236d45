package pump

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// TestStatsOldestInFlightCommit (issue 37, item 19: a record waiting for
// Kafka for minutes showed a replication lag of 0): the pump reports the
// commit time of the oldest record not yet done, in stream order, whatever
// order the sink completes them in, and none once nothing is in flight.
func TestStatsOldestInFlightCommit(t *testing.T) {
	s := &fakeSink{}
	p := newPump(t, Config{}, s)
	runPump(t, p)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	txn := func(id int64, end outbox.LSN, at time.Time) {
		ev, c := event(id, "x"), commit(end)
		ev.Event.CommitTime, c.Commit.CommitTime = at, at
		apply(t, p, begin(end-0x10), ev, c)
	}
	if got := p.Stats().OldestInFlightCommit; !got.IsZero() {
		t.Fatalf("before any record: OldestInFlightCommit = %v, want zero", got)
	}
	txn(1, 0x100, t0)
	txn(2, 0x200, t0.Add(time.Second))
	txn(3, 0x300, t0.Add(2*time.Second))
	want := func(what string, at time.Time) {
		t.Helper()
		if got := p.Stats().OldestInFlightCommit; !got.Equal(at) {
			t.Errorf("%s: OldestInFlightCommit = %v, want %v", what, got, at)
		}
	}
	want("three in flight", t0)
	s.complete(t, 2, nil) // acknowledged out of order: the oldest still waits
	want("the middle one acknowledged", t0)
	s.complete(t, 1, nil)
	want("the first one acknowledged", t0.Add(2*time.Second))
	s.complete(t, 3, nil)
	want("all acknowledged", time.Time{})
}
