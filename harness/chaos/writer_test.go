package chaos

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
)

// Issue 49, item 30: a writer stopped at its target even while a fault
// was still to come; on a slow machine the writers reached the target
// while the last takeover set its standby up, and the takeover then
// waited for a record written after its kill that nobody wrote. A writer
// now stops only once no fault is to come, and writes past its target
// when a fault asks for more (keepWriting).
func TestWritersWritePastTheirTargetWhileAFaultNeedsIt(t *testing.T) {
	t.Parallel()
	url := testenv.Database(t)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE outbox (id bigserial PRIMARY KEY, aggregate_id uuid, topic text, payload jsonb, headers jsonb);
		CREATE TABLE chaos_other (id bigserial PRIMARY KEY, note text)`); err != nil {
		t.Fatal(err)
	}
	const target = 50
	l := &ledger{}
	l.gate.Store(target) // the last fault is to come
	w := newWriter(0, url, "t", 5, l, target, 1, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- w.run(t.Context()) }()
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within a minute (%d events committed)", what, l.events.Load())
			}
		}
	}
	eventually("the target reached", func() bool { return l.events.Load() >= target })
	l.keepWriting(100) // a takeover: records after its kill
	eventually("100 events past the target", func() bool { return l.events.Load() >= target+100 })
	select {
	case err := <-done:
		t.Fatalf("the writer returned (%v) with a fault still to come", err)
	default:
	}
	l.gate.Store(openGate) // no fault is to come
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the writer went on once no fault was to come")
	}
}
