package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/harness/testenv"
)

// TestPostgresCrashLosesNothing: PostgreSQL crashes (pg_ctl stop -m
// immediate: no checkpoint, crash recovery at the next start) while
// writers commit and outboxd streams, twice: once in steady writing, once
// while a large transaction is being streamed and another large one is
// still open (in doubt: it never commits). After recovery outboxd goes
// on: every row the recovered database holds is published, no row of the
// transaction that never committed is, and duplicates stay within the
// transactions that were being streamed or in flight.
func TestPostgresCrashLosesNothing(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	ctx := t.Context()
	createDatabase(t, pg.URL, "app")
	w := migratedWorld(t, onDatabase(t, pg.URL, "app"))
	p := w.start(t, "--reconnect-max-interval", "500ms", "--max-in-flight-records", "1000")
	ws := startWriters(t, w.url, "outbox", w.topic, 3)
	waitFor(t, time.Minute, "300 rows written", func() bool { return ws.count() >= 300 })

	crash := func() {
		t.Helper()
		if err := pg.Stop(ctx, "immediate"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if err := pg.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	crash()
	waitFor(t, time.Minute, "600 rows written after the crash", func() bool { return ws.count() >= 600 })

	// A large transaction committed just before the crash (still being
	// streamed), and one open when it comes (never committed).
	big, err := pgx.Connect(ctx, w.url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := big.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload)
		SELECT '00000000-0000-4000-8000-0000000000b1', $1, jsonb_build_object('committed', g) FROM generate_series(1, 20000) g`, w.topic); err != nil {
		t.Fatal(err)
	}
	open, err := pgx.Connect(ctx, w.url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := open.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var doubtFrom int64
	if err := tx.QueryRow(ctx, `WITH ins AS (INSERT INTO outbox (aggregate_id, topic, payload)
		SELECT '00000000-0000-4000-8000-0000000000b2', $1, jsonb_build_object('in_doubt', g) FROM generate_series(1, 20000) g RETURNING id)
		SELECT min(id) FROM ins`, w.topic).Scan(&doubtFrom); err != nil {
		t.Fatal(err)
	}
	crash()
	big.Close(context.Background())
	open.Close(context.Background())
	waitFor(t, time.Minute, "900 rows written", func() bool { return ws.count() >= 900 })
	ws.halt()

	pool, err := pgxpool.New(ctx, w.url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	committed := tableIDs(t, pool, "outbox")
	counts, _ := w.consumeAll(t, committed, 3*time.Minute)
	have := map[int64]bool{}
	dups := 0
	for _, id := range committed {
		have[id] = true
		dups += counts[id] - 1
	}
	for id := range counts {
		if !have[id] {
			t.Errorf("id %d published, but the recovered database has no such row (in-doubt transaction from id %d)", id, doubtFrom)
		}
	}
	// Each crash re-sends what was not confirmed: the records in flight
	// and the transaction being streamed (the large one, 20,000 rows).
	if bound := 2*1000 + 20000 + 2*5*3; dups > bound {
		t.Errorf("%d duplicates over two crashes, want at most %d", dups, bound)
	}
	t.Logf("%d rows committed and published, %d duplicates over two crashes", len(committed), dups)
	select {
	case <-p.done:
		t.Fatalf("outboxd exited:\n%s", p.log())
	default:
	}
}

// Regression (issue 38): after the slot set-up moved into slot.Provisioner,
// PostgreSQL crashing while run was setting the slot up (reading the
// publication's tables) made run exit with "unexpected EOF" instead of
// reconnecting; under load that was every start TestPostgresCrashLosesNothing
// crashed into. A connection lost during set-up is retried like one that
// cannot be made.
func TestCrashDuringSetUpIsRetried(t *testing.T) {
	t.Parallel()
	for _, after := range []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			t.Parallel()
			pg := testenv.StartPostgres(t)
			ctx := t.Context()
			createDatabase(t, pg.URL, "app")
			w := migratedWorld(t, onDatabase(t, pg.URL, "app"))
			p := w.start(t, "--reconnect-max-interval", "500ms")
			time.Sleep(after)
			if err := pg.Stop(ctx, "immediate"); err != nil {
				t.Fatal(err)
			}
			if err := pg.Start(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, time.Minute, "run streaming after the crash", func() bool {
				select {
				case <-p.done:
					t.Fatalf("run exited after a crash during set-up:\n%s", tail(p.log(), 20))
				default:
				}
				return strings.Count(p.log(), "msg=streaming") > 0 && strings.LastIndex(p.log(), "msg=streaming") > strings.LastIndex(p.log(), "reconnecting")
			})
		})
	}
}
