package cdc

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc/readpace"
	"github.com/outboxd/outboxd/harness/testenv"
)

// Regression: the pacer's short read deadline was kept after the pacer
// stopped asking for one (at a transaction's Commit), so it expired and
// woke the reader once more per transaction for nothing.
func TestRenewWakeReplacesAShortDeadline(t *testing.T) {
	r := &reader{nextStatus: time.Now().Add(time.Hour)}
	defer r.wake.stop()
	const linger = 50 * time.Millisecond
	steps := []struct {
		wait  time.Duration
		fresh bool
		renew bool
	}{
		{confirmInterval, false, true},  // first deadline
		{confirmInterval, false, false}, // kept
		{readpace.TxWait, false, true},  // shortened for the pacer
		{readpace.TxWait, false, false}, // kept while it has not passed
		{confirmInterval, false, true},  // the pacer is done: replaced at once
		{confirmInterval, false, false}, // kept
		// Regression: a linger kept the shorter deadline before it (the
		// pacer's wait for a transaction's rest), and so ended after a
		// millisecond instead of its own length.
		{readpace.TxWait, false, true},
		{linger, true, true},   // a linger's own deadline
		{linger, false, false}, // kept while it lasts (a keepalive read meanwhile)
	}
	for i, s := range steps {
		before := time.Now()
		if got := r.renewWake(t.Context(), s.wait, s.fresh); got != s.renew {
			t.Fatalf("step %d (wait %v): renewed %v, want %v", i, s.wait, got, s.renew)
		}
		if s.renew && r.wake.at.Before(before.Add(s.wait)) {
			t.Fatalf("step %d (wait %v): deadline %v after the call, want at least the wait", i, s.wait, r.wake.at.Sub(before))
		}
	}
}

// checkServerTimeout compares --server-timeout with wal_sender_timeout as
// SHOW prints it; a misread value would warn for nothing or never.
func TestParsePGDuration(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"60s", time.Minute, true},
		{"1min", time.Minute, true},
		{"500ms", 500 * time.Millisecond, true},
		{"2h", 2 * time.Hour, true},
		{"1d", 24 * time.Hour, true},
		{"0", 0, true},
		{"1500", 1500 * time.Millisecond, true},
		{"soon", 0, false},
	} {
		got, ok := parsePGDuration(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parsePGDuration(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// A status asks the server for a reply after a third of the server
// timeout when that comes before the status interval, so that a live
// server answers well before the timeout ends the session.
func TestAskAfter(t *testing.T) {
	for _, tt := range []struct{ status, timeout, want time.Duration }{
		{10 * time.Second, 60 * time.Second, 10 * time.Second},
		{500 * time.Millisecond, 2 * time.Second, 500 * time.Millisecond},
		{10 * time.Second, 15 * time.Second, 5 * time.Second},
	} {
		r := &reader{statusInterval: tt.status, serverTimeout: tt.timeout}
		if got := r.askAfter(); got != tt.want {
			t.Errorf("status %v, timeout %v: asks after %v, want %v", tt.status, tt.timeout, got, tt.want)
		}
	}
}

// Regression: checkServerTimeout ignored a failed SHOW. When the set-up's
// deadline cut the query short, pgconn was already closing the connection
// in a goroutine of its own while the session went on to start replication
// on it (a data race under -race, and a session on a closing connection).
// A failure other than the server's refusal must reach the caller.
func TestCheckServerTimeoutReportsAnUnusableConnection(t *testing.T) {
	ctx := t.Context()
	conn, err := connectReplication(ctx, testenv.Database(t))
	if err != nil {
		t.Fatalf("connecting for replication: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	newStreamer := func() *Streamer { return &Streamer{log: slog.New(slog.DiscardHandler)} }
	if err := newStreamer().checkServerTimeout(ctx, conn); err != nil {
		t.Fatalf("on a live connection: %v", err)
	}
	cut, cancel := context.WithCancel(ctx)
	cancel()
	if err := newStreamer().checkServerTimeout(cut, conn); err == nil {
		t.Fatal("a query cut short by its context was passed over; the session would go on with a closing connection")
	}
}
