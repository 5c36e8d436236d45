package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/bench/relay"
	"github.com/outboxd/outboxd/harness/testenv"
)

// Issue 14: swapping in for a polling relay, and recovering a lost slot
// (dropped by hand, or missing on a promoted standby), with the exported
// snapshot backfill. Each test checks what a consumer sees against the
// rows the database holds at the end.

// writers insert 5-row transactions into a table, each writer under a key
// of its own (so each key's commit order is its id order), until halted.
// A writer that loses its connection reconnects to the current URL. A
// statement is never cancelled: halt waits for the one in hand, so every
// commit is done when it returns. (Cancelled, a statement could still
// commit on the server after halt returned, unseen by the test.)
type writers struct {
	url     atomic.Pointer[string]
	mu      sync.Mutex
	ids     []int64
	stopped atomic.Bool
	wg      sync.WaitGroup
}

func startWriters(t *testing.T, dbURL, table, topic string, n int) *writers {
	t.Helper()
	ctx := context.Background()
	ws := &writers{}
	ws.url.Store(&dbURL)
	for i := range n {
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			key := fmt.Sprintf("00000000-0000-4000-8000-%012d", 100+i)
			var conn *pgx.Conn
			defer func() {
				if conn != nil {
					conn.Close(context.Background())
				}
			}()
			for !ws.stopped.Load() {
				var err error
				if conn == nil {
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					conn, err = pgx.Connect(cctx, *ws.url.Load())
					cancel()
					if err != nil {
						conn = nil
						time.Sleep(100 * time.Millisecond)
						continue
					}
				}
				rows, err := conn.Query(ctx, `INSERT INTO `+table+` (aggregate_id, topic, payload)
					SELECT $1::uuid, $2, jsonb_build_object('writer', $3::int) FROM generate_series(1, 5) RETURNING id`, key, topic, i)
				var got []int64
				if err == nil {
					got, err = pgx.CollectRows(rows, pgx.RowTo[int64])
				}
				if err != nil { // the outcome may be unknown: the test counts the rows the database holds
					conn.Close(context.Background())
					conn = nil
					continue
				}
				ws.mu.Lock()
				ws.ids = append(ws.ids, got...)
				ws.mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	t.Cleanup(ws.halt)
	return ws
}

func (ws *writers) halt() { ws.stopped.Store(true); ws.wg.Wait() }

func (ws *writers) count() int { ws.mu.Lock(); defer ws.mu.Unlock(); return len(ws.ids) }

// tableIDs returns every id in the table.
func tableIDs(t *testing.T, pool *pgxpool.Pool, table string) []int64 {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT id FROM `+table+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// checkKeyOrder reports every key whose ids, in the order a consumer first
// saw each, are not increasing: a redelivered id may come again later,
// but nothing new may come before what its key committed first.
func checkKeyOrder(t *testing.T, byKey map[string][]int64) {
	t.Helper()
	for key, ids := range byKey {
		seen := map[int64]bool{}
		var last int64
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			if id < last {
				t.Errorf("key %s: id %d first seen after id %d", key, id, last)
			}
			last = id
		}
	}
}

var suggestedPredicate = regexp.MustCompile(`created_at >= '([^']+)'`)

// waitAcknowledgedRecorded waits until run recorded an acknowledged commit
// time in outboxd_slots (the recovery command's suggestion comes from it).
func waitAcknowledgedRecorded(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	waitFor(t, time.Minute, "an acknowledged commit time in outboxd_slots", func() bool {
		var ok bool
		err := pool.QueryRow(t.Context(), `SELECT acknowledged_commit_time IS NOT NULL FROM outboxd_slots WHERE slot_name = $1`, slot).Scan(&ok)
		return err == nil && ok
	})
}

// dropActiveSlot drops a slot a walsender is streaming from: terminate it,
// drop before the publisher reconnects, repeat until the drop wins.
func dropActiveSlot(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	waitFor(t, time.Minute, "the slot dropped", func() bool {
		_, _ = pool.Exec(t.Context(), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		_, err := pool.Exec(t.Context(), `SELECT pg_drop_replication_slot($1)`, slot)
		return err == nil
	})
}

// refusesLostSlot checks the log of a run that found its slot gone.
func refusesLostSlot(t *testing.T, p *proc, slot string, want ...string) (since string) {
	t.Helper()
	if code := p.wait(t, time.Minute); code != exitError {
		t.Fatalf("run with the slot gone: exit %d, want %d; log:\n%s", code, exitError, p.log())
	}
	log := p.log()
	// The command is also printed unescaped, ready to copy.
	for _, w := range append([]string{slot, "is gone", "in no slot", `outboxd run --create-slot --backfill-where "created_at >= '`}, want...) {
		if !strings.Contains(log, w) {
			t.Errorf("the refusal does not say %q:\n%s", w, log)
		}
	}
	t.Logf("the refusal, as printed for a human:\n%s", log[strings.LastIndex(log, "replication slot does not exist"):])
	m := suggestedPredicate.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no suggested predicate in:\n%s", log)
	}
	return m[1]
}

// recoverWithSuggestion runs the suggested recovery command while the
// writers go on, then checks every row of the table arrived, in order per
// key, and that every duplicate lies within the predicate. It returns how
// often each id arrived, the duplicates and the rows the predicate matched.
func recoverWithSuggestion(t *testing.T, w *world, ws *writers, since string) (count map[int64]int, dups, matched int) {
	t.Helper()
	pred := "created_at >= '" + since + "'"
	p := w.start(t, "--create-slot", "--backfill-where", pred)
	waitFor(t, time.Minute, "the backfill acknowledged", func() bool { return strings.Contains(p.log(), "backfill acknowledged") })
	before := ws.count()
	waitFor(t, time.Minute, "writers writing on", func() bool { return ws.count() > before+50 })
	ws.halt()
	want := tableIDs(t, w.pool, "outbox")
	count, byKey := w.consumeByKey(t, want, 2*time.Minute)
	checkKeyOrder(t, byKey)
	inPredicate := map[int64]bool{}
	rows, err := w.pool.Query(t.Context(), `SELECT id FROM outbox WHERE `+pred)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		inPredicate[id] = true
	}
	for id, n := range count {
		if n > 1 {
			dups++
			if !inPredicate[id] {
				t.Errorf("id %d published %d times, and it lies outside the predicate %s", id, n, pred)
			}
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("recovery run: exit %d after SIGTERM; log:\n%s", code, p.log())
	}
	return count, dups, len(ids)
}

// Regression test for issue 14: with the slot dropped while writers ran,
// run created a new slot with a warning, exited 0, and the rows committed
// meanwhile never reached Kafka. Now run stops with the recovery command,
// and that command brings every row to Kafka.
func TestLostSlotRunRefusesThenRecovers(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := newWorld(t)
	p := w.start(t, "--wal-check-interval", "200ms")
	ws := startWriters(t, w.url, "outbox", w.topic, 2)
	waitAcknowledgedRecorded(t, w.pool, w.slot)
	dropActiveSlot(t, w.pool, w.slot)
	since := refusesLostSlot(t, p, w.slot, "Kafka acknowledged commits up to")

	// The reproduction: a plain run on the missing slot.
	again := w.start(t)
	refusesLostSlot(t, again, w.slot)
	var exists bool
	if err := w.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, w.slot).Scan(&exists); err != nil || exists {
		t.Fatalf("run without --create-slot created the slot (exists %v, %v)", exists, err)
	}
	_, dups, matched := recoverWithSuggestion(t, w, ws, since)
	t.Logf("measured: %d rows, the suggested predicate matched %d, %d published twice (all within it)", len(tableIDs(t, w.pool, "outbox")), matched, dups)
}

// The cutover of issue 14: a polling relay publishes part of a stream and
// is stopped while writers go on; outboxd takes over with --backfill-where
// "published_at IS NULL". A consumer sees every row exactly once across
// both, in commit order per key.
func TestCutoverFromPollingRelay(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := &world{url: testenv.Database(t), brokers: strings.Join(testenv.Brokers(t), ","), topic: testenv.Topic(t, 3), slot: testenv.Name(t, "slot")}
	var err error
	if w.pool, err = pgxpool.New(t.Context(), w.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pool.Close)
	if _, err := w.pool.Exec(t.Context(), relay.Schema); err != nil {
		t.Fatal(err)
	}
	ws := startWriters(t, w.url, "outbox_relay", w.topic, 2)

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(w.brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, stopRelay := context.WithCancel(t.Context())
	relayed := make(chan error, 1)
	go func() {
		_, err := relay.Run(rctx, w.pool, cl, relay.Config{Workers: 1, BatchSize: 50, PollInterval: 20 * time.Millisecond})
		relayed <- err
	}()
	waitFor(t, time.Minute, "the relay publishing 300 rows", func() bool {
		var n int
		_ = w.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_relay WHERE published_at IS NOT NULL`).Scan(&n)
		return n >= 300
	})
	stopRelay()
	if err := <-relayed; err != nil {
		t.Fatalf("relay: %v", err)
	}
	var byRelay int
	if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_relay WHERE published_at IS NOT NULL`).Scan(&byRelay); err != nil {
		t.Fatal(err)
	}

	if out, err := exec.Command(builtBinary, "migrate", "--database-url", w.url, "--table", "outbox_relay", "--create-slot=false").CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate: %v\n%s", err, out)
	}
	p := w.start(t, "--create-slot", "--backfill-where", "published_at IS NULL", "--metrics-addr", anyPort)
	addr := servedAt(t, p.log)
	waitFor(t, time.Minute, "the backfill acknowledged", func() bool { return strings.Contains(p.log(), "backfill acknowledged") })
	_, body := get(addr, "/metrics")
	if done, total := metric(body, w.slot, "outboxd_backfill_rows"), metric(body, w.slot, "outboxd_backfill_rows_total"); total <= 0 || done != total {
		t.Errorf("metrics after the backfill: outboxd_backfill_rows %v of outboxd_backfill_rows_total %v, want all of more than 0", done, total)
	}
	before := ws.count()
	waitFor(t, time.Minute, "writers writing on", func() bool { return ws.count() > before+50 })
	ws.halt()
	want := tableIDs(t, w.pool, "outbox_relay")
	count, byKey := w.consumeByKey(t, want, 2*time.Minute)
	for id, n := range count {
		if n != 1 {
			t.Errorf("id %d published %d times across the relay and outboxd, want once", id, n)
		}
	}
	if len(count) != len(want) {
		in := map[int64]bool{}
		for _, id := range want {
			in[id] = true
		}
		var extra []int64
		for id := range count {
			if !in[id] {
				extra = append(extra, id)
			}
		}
		slices.Sort(extra)
		now := tableIDs(t, w.pool, "outbox_relay")
		t.Errorf("%d distinct ids published, want the table's %d; published but not in it: %v (the table holds %d rows now)", len(count), len(want), extra, len(now))
	}
	checkKeyOrder(t, byKey)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("exit %d after SIGTERM; log:\n%s", code, p.log())
	}
	t.Logf("measured: %d rows, %d published by the relay, the rest by outboxd (backfill and stream), 0 duplicates", len(want), byRelay)
}

// The failover of issue 14 without a failover slot (every version; 17+
// with --failover-slot=off): a physical standby (base backup, streaming
// replication; a base backup copies no slots) is promoted while writers
// run and outboxd streams. outboxd pointed at the new primary refuses (the
// slot is not there, and outboxd_slots, which replication carried over,
// says it existed on the old timeline); the recovery command brings every
// row the new primary holds to Kafka. On 16+ a slot of the same name
// created on the standby (decoding on a standby) is refused first: it was
// not synchronized from the old primary (issue 15).
func TestFailoverToAStandbyRecovers(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	primary := testenv.StartPostgres(t)
	standby := testenv.StartStandby(t, primary)
	ctx := t.Context()
	createDatabase(t, primary.URL, "app")
	w := migratedWorld(t, onDatabase(t, primary.URL, "app"), "--failover-slot=off")
	p := w.start(t, "--wal-check-interval", "200ms")
	ws := startWriters(t, w.url, "outbox", w.topic, 2)
	waitAcknowledgedRecorded(t, w.pool, w.slot)
	waitFor(t, time.Minute, "200 rows written", func() bool { return ws.count() >= 200 })
	unsynced := serverVersion(t, primary.URL) >= 160000
	if unsynced {
		createSlotOnStandby(t, w.pool, standby.URL, "app", w.slot)
	}

	// The primary dies; the standby is promoted; everyone moves to it.
	w.pool.Close()
	if err := primary.Stop(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	w.url = onDatabase(t, standby.URL, "app")
	ws.url.Store(&w.url)
	var err error
	if w.pool, err = pgxpool.New(ctx, w.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pool.Close)
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // reconnecting to the dead primary
	p.wait(t, time.Minute)

	if unsynced {
		// Regression test for issue 15: outboxd took a slot of the same
		// name on the promoted standby for its own (logged as moved to
		// another server) and streamed from a position it never confirmed.
		// migrate (run first in many deploys) must refuse it too: it
		// recorded the slot as moved, and run then no longer saw the
		// change of timeline.
		out, err := exec.Command(builtBinary, "migrate", "--database-url", w.url, "--slot", w.slot, "--failover-slot=off").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "was not synchronized") {
			t.Fatalf("migrate with an unsynchronized slot on the promoted standby = %v, want a refusal saying it was not synchronized:\n%s", err, out)
		}
		q := w.start(t)
		if code := q.wait(t, time.Minute); code != exitError || !strings.Contains(q.log(), "was not synchronized") || !strings.Contains(q.log(), "timeline 2") {
			t.Fatalf("run with an unsynchronized slot on the promoted standby: exit %d, want %d saying it was not synchronized; log:\n%s", code, exitError, q.log())
		}
		if _, err := w.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, w.slot); err != nil {
			t.Fatal(err)
		}
	}
	since := refusesLostSlot(t, w.start(t), w.slot, "timeline 2", "failover")
	count, dups, matched := recoverWithSuggestion(t, w, ws, since)

	// Records of commits the standby never received (asynchronous
	// replication): in Kafka, not in the new primary. Counted, not failed:
	// only a synchronous standby (or PostgreSQL 17's failover slots with
	// synchronized_standby_slots) prevents them.
	have := map[int64]bool{}
	for _, id := range tableIDs(t, w.pool, "outbox") {
		have[id] = true
	}
	phantoms := 0
	for id := range count {
		if !have[id] {
			phantoms++
		}
	}
	t.Logf("measured: %d rows on the new primary, the suggested predicate matched %d, %d published twice (all within it), %d records of commits lost with the old primary",
		len(have), matched, dups, phantoms)
}

// createSlotOnStandby creates a logical slot on a standby (16+), which
// waits for a snapshot of running transactions from the primary: ask the
// primary for one until the creation returns.
func createSlotOnStandby(t *testing.T, primary *pgxpool.Pool, standbyServer, db, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The standby must first have replayed the database itself (under
	// load it trailed the primary by seconds and had no "app" yet).
	var lsn string
	if err := primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the standby replayed the primary's WAL", func() bool {
		c, err := pgx.Connect(ctx, standbyServer)
		if err != nil {
			return false
		}
		defer c.Close(context.Background())
		var ok bool
		return c.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&ok) == nil && ok
	})
	conn, err := pgx.Connect(ctx, onDatabase(t, standbyServer, db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name)
		done <- err
	}()
	for {
		select {
		case err := <-done: // within the minute: ctx cancels the statement
			if err != nil {
				t.Fatalf("creating slot %s on the standby: %v", name, err)
			}
			return
		case <-time.After(100 * time.Millisecond):
			_, _ = primary.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
		}
	}
}

// migrate creates the slot on a fresh install only: it refuses a slot
// outboxd_slots says was lost, and one over a table that already holds
// rows (they would never be published).
func TestMigrateCreatesTheSlotOnlyOnAFreshInstall(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	migrate := func(dbURL, slot string) (string, error) {
		out, err := exec.Command(builtBinary, "migrate", "--database-url", dbURL, "--slot", slot).CombinedOutput()
		return string(out), err
	}
	slotExists := func(pool *pgxpool.Pool, slot string) bool {
		var ok bool
		if err := pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	t.Run("lost slot", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t) // migrated: slot created and recorded
		var by string
		if err := w.pool.QueryRow(t.Context(), `SELECT created_by FROM outboxd_slots WHERE slot_name = $1`, w.slot).Scan(&by); err != nil || by != "migrate" {
			t.Fatalf("outboxd_slots created_by = %q, %v; want migrate", by, err)
		}
		if out, err := migrate(w.url, w.slot); err != nil {
			t.Fatalf("migrate again with the slot there: %v\n%s", err, out)
		}
		if _, err := w.pool.Exec(t.Context(), `SELECT pg_drop_replication_slot($1)`, w.slot); err != nil {
			t.Fatal(err)
		}
		out, err := migrate(w.url, w.slot)
		if err == nil || !strings.Contains(out, "is gone") || !strings.Contains(out, "--backfill-where") {
			t.Fatalf("migrate with the recorded slot gone = %v, want a refusal with the recovery command:\n%s", err, out)
		}
		if slotExists(w.pool, w.slot) {
			t.Error("migrate created the lost slot again")
		}
	})
	t.Run("table with rows", func(t *testing.T) {
		t.Parallel()
		dbURL := testenv.Database(t)
		slot := testenv.Name(t, "slot")
		pool, err := pgxpool.New(t.Context(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if _, err := pool.Exec(t.Context(), relay.Schema+`; INSERT INTO outbox_relay (aggregate_id, topic, payload) VALUES (gen_random_uuid(), 't', '{}')`); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(builtBinary, "migrate", "--database-url", dbURL, "--slot", slot, "--table", "outbox_relay").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "already holds rows") || !strings.Contains(string(out), "--create-slot=false") {
			t.Fatalf("migrate over a table with rows = %v, want a refusal saying how to publish them:\n%s", err, out)
		}
		if slotExists(pool, slot) {
			t.Error("migrate created a slot over a table with rows")
		}
	})
}

// A backfill stopped midway (kill -9, or SIGTERM) is run again whole by the
// next plain run, while writers commit rows that the slot streams all
// along: nothing of the table is lost, and the record says it finished.
// Issue 51 (a peer's bug: Redpanda Connect moved its slot on before the
// snapshot's rows were acknowledged, and lost them in a crash): the
// backfill counts as done, and is not run again, only once Kafka
// acknowledged every row of it. Exactly-once refuses a backfill
// (--backfill-where with --delivery exactly-once: TestParse).
func TestBackfillStoppedMidwayRunsAgainWhole(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	for _, fault := range []string{"kill9", "sigterm"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			w := migratedWorld(t, testenv.Database(t), "--create-slot=false")
			const rows = 200_000
			if _, err := w.pool.Exec(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload)
				SELECT ('00000000-0000-4000-8000-' || lpad((g % 50)::text, 12, '0'))::uuid, $1, jsonb_build_object('n', g) FROM generate_series(1, $2) g`, w.topic, rows); err != nil {
				t.Fatal(err)
			}
			p := w.start(t, "--create-slot", "--backfill-where", "true", "--metrics-addr", anyPort, "--max-in-flight-records", "1000")
			addr := servedAt(t, p.log)
			// Rows committed during the backfill, on the backfill's keys:
			// the slot streams them.
			stop := make(chan struct{})
			written := make(chan error, 1)
			go func() {
				for {
					select {
					case <-stop:
						written <- nil
						return
					case <-time.After(5 * time.Millisecond):
					}
					if _, err := w.pool.Exec(context.Background(), `INSERT INTO outbox (aggregate_id, topic, payload)
						SELECT ('00000000-0000-4000-8000-' || lpad((g % 50)::text, 12, '0'))::uuid, $1, jsonb_build_object('streamed', g) FROM generate_series(1, 5) g`, w.topic); err != nil {
						written <- err
						return
					}
				}
			}()
			waitFor(t, time.Minute, "the backfill under way", func() bool {
				_, body := get(addr, "/metrics")
				return metric(body, w.slot, "outboxd_backfill_rows") > 0
			})
			switch fault {
			case "kill9":
				p.kill(t)
			case "sigterm":
				p.stop(t)
			}
			if strings.Contains(p.log(), "backfill acknowledged") {
				t.Fatal("the backfill finished before the stop: the test proves nothing")
			}
			var done bool
			if err := w.pool.QueryRow(t.Context(), `SELECT backfill_done_at IS NOT NULL FROM outboxd_slots WHERE slot_name = $1`, w.slot).Scan(&done); err != nil || done {
				t.Fatalf("after a stop midway, outboxd_slots records the backfill done (%v, %v): the next run would not run it again", done, err)
			}
			again := w.start(t)
			waitFor(t, 2*time.Minute, "the second backfill acknowledged", func() bool { return strings.Contains(again.log(), "backfill acknowledged") })
			if !strings.Contains(again.log(), "did not finish") {
				t.Errorf("the second run does not say it backfills again:\n%s", again.log())
			}
			close(stop)
			if err := <-written; err != nil {
				t.Fatal(err)
			}
			count, byKey := w.consumeByKey(t, tableIDs(t, w.pool, "outbox"), 2*time.Minute)
			checkKeyOrder(t, byKey)
			dups := 0
			for _, n := range count {
				dups += n - 1
			}
			// The second backfill's snapshot holds the rows, and those the
			// writers committed before it.
			var backfilled int
			if err := w.pool.QueryRow(t.Context(), `SELECT backfill_done_at IS NOT NULL, backfill_rows FROM outboxd_slots WHERE slot_name = $1`, w.slot).Scan(&done, &backfilled); err != nil || !done || backfilled < rows {
				t.Errorf("outboxd_slots records the backfill done %v, of %d rows (%v); want done, of at least %d", done, backfilled, err, rows)
			}
			_ = again.cmd.Process.Signal(syscall.SIGTERM)
			if code := again.wait(t, time.Minute); code != 0 {
				t.Errorf("exit %d after SIGTERM; log:\n%s", code, again.log())
			}
			t.Logf("measured: %d rows backfilled, %d streamed beside, %d records sent twice (the stopped attempt's), 0 lost", rows, len(count)-rows, dups)
		})
	}
}
