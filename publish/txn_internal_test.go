package publish

import (
	"errors"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/outbox"
)

// Regression: when a record could not be added to a Kafka transaction
// (BeginTransaction failed), the records taken from the queue after it
// were dropped without their done callback, so the pump waited for them
// until its shutdown timeout.
func TestRecordsNotAddedAreFailedOnce(t *testing.T) {
	t.Parallel()
	// Not transactional: BeginTransaction fails at once, without a broker.
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := &TxnProducer{cl: cl, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	calls := make([]int, 3)
	var items []txnItem
	for i := range calls {
		ev := &outbox.Event{Headers: []outbox.Header{{Key: "id", Value: []byte(strconv.Itoa(i + 1))}}, Topic: "t", CommitLSN: 0x100, Index: i}
		items = append(items, txnItem{ev: ev, done: func(err error) {
			calls[i]++
			if !errors.Is(err, outbox.ErrTransactionAborted) {
				t.Errorf("record %d failed with %v, want an aborted transaction", i+1, err)
			}
		}})
	}
	p.queue = []txnItem{{ev: &outbox.Event{Headers: []outbox.Header{{Key: "id", Value: []byte("9")}}, Topic: "t", CommitLSN: 0x200}, done: func(error) { calls = append(calls, 1) }}}
	if err := p.addAll(items); err == nil {
		t.Fatal("addAll succeeded on a client that cannot begin a transaction")
	}
	if len(p.queue) != 4 || p.queue[0].ev.ID() != "1" || p.queue[3].ev.ID() != "9" {
		t.Fatalf("queue after the failure holds %d records; want the 3 not added, in order, before the one queued", len(p.queue))
	}
	p.shutdown(errors.New("stopping"))
	for i, n := range calls[:3] {
		if n != 1 {
			t.Errorf("record %d: done called %d times, want once", i+1, n)
		}
	}
}

// A transaction's commit starts early by what commits take, so that it
// ends within the interval, but never before half of it.
func TestTransactionCommitStartsEarlyByWhatCommitsTake(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		took, want time.Duration // average commit, commit start after the first record
	}{
		{0, 100 * time.Millisecond},
		{12 * time.Millisecond, 88 * time.Millisecond},
		{50 * time.Millisecond, 50 * time.Millisecond},
		{400 * time.Millisecond, 50 * time.Millisecond},
	} {
		p := &TxnProducer{cfg: TxnConfig{Interval: 100 * time.Millisecond}, openSince: t0, commitTook: tc.took}
		if got := p.due().Sub(t0); got != tc.want {
			t.Errorf("commits taking %v: commit at %v, want %v", tc.took, got, tc.want)
		}
	}
	avg := time.Duration(0)
	for _, took := range []time.Duration{16, 16, 16, 48} {
		avg = tookToCommit(avg, took*time.Millisecond)
	}
	if avg != 20*time.Millisecond {
		t.Errorf("average of commits taking 16, 16, 16, then 48 ms: %v, want 20ms", avg)
	}
}

func TestTxnRetryBackoff(t *testing.T) {
	t.Parallel()
	for fails, want := range map[int]time.Duration{0: 20 * time.Millisecond, 1: 20 * time.Millisecond, 2: 40 * time.Millisecond,
		5: 320 * time.Millisecond, 9: 5 * time.Second, 1000: 5 * time.Second} {
		if got := txnRetryBackoff(fails); got != want {
			t.Errorf("after %d failures: %v, want %v", fails, got, want)
		}
	}
}
