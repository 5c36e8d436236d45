package main

import (
	"strings"
	"testing"
	"time"
)

// Issue 49, item 14: an exactly-once publisher that lost its slot to
// another process and got it back failed once, fenced: its Kafka producer
// still had the epoch the other process's producer had fenced. A new
// replication session now prepares the producer again (fencing the
// other, reading the progress topic) before its first transaction.
func TestExactlyOnceRegainedSlotIsClean(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	args := eosArgs(t, w, "--slot-retry-interval", "100ms")
	first := w.start(t, args...)
	want := w.write(t, 5, 0)
	w.consumeAll(t, want, time.Minute, readCommitted)
	second := w.start(t, args...)
	waitFor(t, 30*time.Second, "the second standing by", func() bool { return strings.Contains(second.log(), "in use by another process") })
	// The first's walsender goes, as when its connection breaks; the
	// second, retrying every 100 ms, or the first, reconnecting, takes
	// the slot: until the second has it.
	waitFor(t, 2*time.Minute, "the second streaming", func() bool {
		if strings.Contains(second.log(), "msg=streaming") {
			return true
		}
		if _, err := w.pool.Exec(t.Context(), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, w.slot); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		return false
	})
	// The second's producer fences the first's.
	want = append(want, w.write(t, 5, 100)...)
	w.consumeAll(t, want, time.Minute, readCommitted)
	waitFor(t, time.Minute, "the first standing by", func() bool { return strings.Contains(first.log(), "in use by another process") })
	second.stop(t)
	waitFor(t, time.Minute, "the first streaming again", func() bool { return strings.Count(first.log(), "msg=streaming") >= 2 })
	want = append(want, w.write(t, 5, 200)...)
	requireExactlyOnce(t, w, want)
	if log := first.log(); strings.Contains(log, "fenced") {
		t.Fatalf("the first publisher, taking its slot back, was fenced; its log:\n%s", log)
	}
	first.stop(t)
}
