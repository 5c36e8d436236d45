package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/slot"
)

// Issue 52: decoding on a standby (PostgreSQL 16+). The slot is on a
// physical standby (--database-url), what must be written goes to the
// primary (--primary-url).

// standbyPair is a primary, a streaming standby of it (hot_standby_feedback
// on, a physical slot on the primary: the test bed's), and database app on
// both.
type standbyPair struct {
	primary, standby       *testbed.Postgres
	primaryApp, standbyApp string
	version                int
}

func startStandbyPair(t *testing.T) *standbyPair {
	t.Helper()
	primary := testenv.StartPostgres(t)
	sp := &standbyPair{primary: primary, version: serverVersion(t, primary.URL)}
	execOn(t, primary.URL, "CREATE DATABASE app")
	sp.standby = testenv.StartStandby(t, primary)
	sp.primaryApp, sp.standbyApp = onDatabase(t, primary.URL, "app"), onDatabase(t, sp.standby.URL, "app")
	return sp
}

// rebuild replaces the standby with a new one made from the primary (a
// base backup: without the old standby's slot), as an operator rebuilds
// a standby.
func (sp *standbyPair) rebuild(t *testing.T) {
	t.Helper()
	if err := sp.standby.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
	sp.standby = testenv.StartStandby(t, sp.primary)
	sp.standbyApp = onDatabase(t, sp.standby.URL, "app")
}

// migrated migrates app for decoding on the standby and returns the world
// whose url is the standby's (run's --database-url) and whose pool writes
// on the primary.
func (sp *standbyPair) migrated(t *testing.T) *world {
	t.Helper()
	w := &world{url: sp.standbyApp, brokers: strings.Join(testenv.Brokers(t), ","), topic: testenv.Topic(t, 3), slot: testenv.Name(t, "slot")}
	if out, err := exec.Command(builtBinary, "migrate", "--database-url", sp.standbyApp, "--primary-url", sp.primaryApp, "--slot", w.slot).CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate on the standby: %v\n%s", err, out)
	}
	var err error
	if w.pool, err = pgxpool.New(t.Context(), sp.primaryApp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pool.Close)
	return w
}

func execOn(t *testing.T, url string, qs ...string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range qs {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func queryBool(t *testing.T, url, q string, args ...any) bool {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		return false // a server restarting: asked again
	}
	defer conn.Close(context.Background())
	var b bool
	if err := conn.QueryRow(t.Context(), q, args...).Scan(&b); err != nil {
		return false
	}
	return b
}

// outboxd runs against a standby: the rows written on the primary reach
// Kafka from the standby's slot across a restart of the standby, a
// restart of the primary and the standby's promotion, with nothing lost
// and each key's order kept.
func TestDecodingOnAStandby(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	sp := startStandbyPair(t)
	if sp.version < slot.StandbyVersion {
		t.Skipf("decoding on a standby needs PostgreSQL 16 or later; this is %d (TestStandbyIsCheckedBeforeDecoding covers its refusal)", sp.version)
	}
	ctx := t.Context()
	// Without the primary's URL, a standby is refused, saying what to give.
	out, err := exec.Command(builtBinary, "migrate", "--database-url", sp.standbyApp, "--slot", "s_refused").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--primary-url") || !strings.Contains(string(out), "nothing was changed") {
		t.Errorf("migrate on a standby without --primary-url (%v) does not refuse naming it:\n%s", err, out)
	}
	w := sp.migrated(t)
	status, err := exec.Command(builtBinary, "status", "--database-url", sp.standbyApp, "--slot", w.slot).CombinedOutput()
	if err != nil || !regexp.MustCompile(`decoding\s+on this standby`).Match(status) {
		t.Fatalf("outboxd status on the standby (%v) does not say the slot decodes there:\n%s", err, status)
	}
	p := w.start(t, "--primary-url", sp.primaryApp, "--heartbeat-interval", "500ms", "--wal-check-interval", "200ms")
	ws := startWriters(t, sp.primaryApp, "outbox", w.topic, 2)
	waitFor(t, time.Minute, "100 rows written", func() bool { return ws.count() >= 100 })
	waitFor(t, time.Minute, "run saying it decodes on a standby", func() bool { return strings.Contains(p.log(), "decoding on a standby") })

	// The standby restarts: the stream resumes on it.
	sessions := strings.Count(p.log(), "msg=streaming")
	if err := sp.standby.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	if err := sp.standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "streaming again after the standby's restart", func() bool { return strings.Count(p.log(), "msg=streaming") > sessions })
	before := ws.count()
	waitFor(t, time.Minute, "more rows written", func() bool { return ws.count() >= before+100 })

	// The primary restarts: the standby reconnects to it, and so do the
	// writers.
	if err := sp.primary.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	if err := sp.primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	before = ws.count()
	waitFor(t, 2*time.Minute, "rows written after the primary's restart", func() bool { return ws.count() >= before+100 })
	waitFor(t, time.Minute, "the standby caught up", func() bool {
		var lsn string
		if err := w.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
			return false
		}
		return queryBool(t, sp.standbyApp, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn)
	})

	// The primary dies and the decoding standby is promoted: the slot
	// carries on there, and the log says it now decodes on a primary.
	w.pool.Close()
	if err := sp.primary.Stop(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	if err := sp.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	ws.url.Store(&sp.standbyApp)
	waitFor(t, 2*time.Minute, "outboxd saying the standby was promoted", func() bool { return strings.Contains(p.log(), "is a primary now") })
	before = ws.count()
	waitFor(t, time.Minute, "rows written on the promoted standby", func() bool { return ws.count() >= before+100 })
	ws.halt()
	select {
	case <-p.done:
		t.Fatalf("outboxd exited across the promotion; log:\n%s", p.log())
	default:
	}
	if w.pool, err = pgxpool.New(ctx, sp.standbyApp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pool.Close)
	want := tableIDs(t, w.pool, "outbox")
	count, byKey := w.consumeByKey(t, want, 2*time.Minute)
	checkKeyOrder(t, byKey)
	missing, dups := tally(count, want)
	if missing > 0 {
		t.Errorf("%d of %d rows never reached Kafka", missing, len(want))
	}
	t.Logf("measured: %d rows across a standby restart, a primary restart and the standby's promotion: %d missing, %d published more than once", len(want), missing, dups)
	p.stop(t)

	// A new process adopts the slot on the promoted standby: its new
	// timeline is that server's own promotion, not a slot nobody
	// synchronized (which 16 cannot tell apart otherwise).
	again := w.start(t, "--primary-url", sp.primaryApp)
	ids := w.write(t, 10, 5000)
	count, _ = w.consumeAll(t, ids, time.Minute)
	if len(count) < len(ids) {
		t.Errorf("a new process on the promoted standby published %d of %d rows; log:\n%s", len(count), len(ids), again.log())
	}
	again.stop(t)
}

// What a standby must have is checked before anything is created: 15 is
// refused naming the version, a standby without hot_standby_feedback with
// its fix. A slot the standby lost to a conflict is refused with the
// cause, a rebuilt standby's missing slot as lost, and the recovery
// (--create-slot --backfill-where on the new standby) publishes every row;
// so is the slot a promoted sibling standby never had.
func TestStandbyIsCheckedBeforeDecoding(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	sp := startStandbyPair(t)
	migrate := func(slotName string) (string, error) {
		out, err := exec.Command(builtBinary, "migrate", "--database-url", sp.standbyApp, "--primary-url", sp.primaryApp, "--slot", slotName).CombinedOutput()
		return string(out), err
	}
	if sp.version < slot.StandbyVersion {
		out, err := migrate("s15")
		if err == nil || !strings.Contains(out, "16 or later") {
			t.Fatalf("migrate for a PostgreSQL %d standby (%v) does not refuse naming the version:\n%s", sp.version, err, out)
		}
		return
	}
	execOn(t, sp.standby.URL, "ALTER SYSTEM SET hot_standby_feedback = off", "SELECT pg_reload_conf()")
	waitFor(t, time.Minute, "hot_standby_feedback off", func() bool {
		return queryBool(t, sp.standbyApp, `SELECT current_setting('hot_standby_feedback') = 'off'`)
	})
	out, err := migrate("s_nofeedback")
	if err == nil || !strings.Contains(out, "hot_standby_feedback = on") || !strings.Contains(out, "nothing was changed") {
		t.Errorf("migrate on a standby without hot_standby_feedback (%v) does not refuse with the fix:\n%s", err, out)
	}
	if queryBool(t, sp.primaryApp, `SELECT to_regclass('outboxd_slots') IS NOT NULL`) {
		t.Error("migrate refused the standby but applied the schema on the primary first")
	}
	// Issue 53: doctor finds the same before a run, and a standby given
	// without the primary's URL.
	brokers := strings.Join(testenv.Brokers(t), ",")
	_, findings, dout := doctor(t, "--database-url", sp.standbyApp, "--primary-url", sp.primaryApp, "--slot", "s_nofeedback", "--brokers", brokers)
	if f := findingOf(findings, "standby"); f == nil || f.Severity != sevFail || !strings.Contains(f.Found, "hot_standby_feedback = on") {
		t.Errorf("doctor on a standby without hot_standby_feedback: %+v, want a failure with the fix:\n%s", f, dout)
	}
	_, findings, dout = doctor(t, "--database-url", sp.standbyApp, "--slot", "s_nofeedback", "--brokers", brokers)
	if f := findingOf(findings, "standby"); f == nil || f.Severity != sevFail || !strings.Contains(f.Found, "--primary-url") {
		t.Errorf("doctor on a standby without --primary-url: %+v, want a failure naming it:\n%s", f, dout)
	}
	execOn(t, sp.standby.URL, "ALTER SYSTEM RESET hot_standby_feedback", "SELECT pg_reload_conf()")
	waitFor(t, time.Minute, "hot_standby_feedback on", func() bool {
		return queryBool(t, sp.standbyApp, `SELECT current_setting('hot_standby_feedback') = 'on'`)
	})

	w := sp.migrated(t)
	_, findings, dout = doctor(t, "--database-url", sp.standbyApp, "--primary-url", sp.primaryApp, "--slot", w.slot, "--brokers", brokers)
	if f := findingOf(findings, "standby"); f == nil || f.Severity != sevOK {
		t.Errorf("doctor on a standby fit to decode: %+v, want ok:\n%s", f, dout)
	}
	p := w.start(t, "--primary-url", sp.primaryApp)
	ids := w.write(t, 10, 0)
	count, _ := w.consumeAll(t, ids, time.Minute)
	if len(count) < len(ids) {
		t.Fatalf("%d of %d rows published before the conflict", len(count), len(ids))
	}
	// Issue 53: a replay reads the rows on the standby and keeps its
	// progress on the primary; without --primary-url it is refused.
	replayTo := testenv.Topic(t, 1)
	if code, out, errOut := outboxd(t, nil, "replay", "--database-url", sp.standbyApp, "--brokers", brokers, "--replay-topic", replayTo); code == exitOK || !strings.Contains(errOut, "--primary-url") {
		t.Errorf("replay on a standby without --primary-url: exit %d, want refused naming it:\n%s%s", code, out, errOut)
	}
	if code, out, errOut := outboxd(t, nil, "replay", "--database-url", sp.standbyApp, "--primary-url", sp.primaryApp, "--brokers", brokers, "--replay-topic", replayTo); code != exitOK ||
		!strings.Contains(out, fmt.Sprintf("%d of %d rows acknowledged", len(ids), len(ids))) {
		t.Errorf("replay on a standby with --primary-url: exit %d, want all %d rows:\n%s%s", code, len(ids), out, errOut)
	}
	if !queryBool(t, sp.primaryApp, `SELECT EXISTS (SELECT 1 FROM outboxd_replays WHERE finished_at IS NOT NULL)`) {
		t.Error("the replay on the standby recorded no finished replay on the primary")
	}
	p.stop(t)

	// wal_level lowered on the primary: the standby invalidates its slot
	// when it replays the change (wal_level_insufficient; 16 says
	// conflicting).
	execOn(t, sp.primary.URL, "ALTER SYSTEM SET wal_level = replica")
	restart := func() {
		if err := sp.primary.Stop(t.Context(), "fast"); err != nil {
			t.Fatal(err)
		}
		if err := sp.primary.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	restart()
	waitFor(t, 2*time.Minute, "the standby's slot invalidated", func() bool {
		return queryBool(t, sp.standbyApp, `SELECT conflicting FROM pg_replication_slots WHERE slot_name = $1`, w.slot)
	})
	execOn(t, sp.primary.URL, "ALTER SYSTEM RESET wal_level")
	restart()
	refused := w.start(t, "--primary-url", sp.primaryApp)
	if code := refused.wait(t, time.Minute); code != exitError {
		t.Fatalf("run on the invalidated slot: exit %d, want %d; log:\n%s", code, exitError, refused.log())
	}
	for _, s := range []string{"wal_level was lowered", "--create-slot"} {
		if !strings.Contains(refused.log(), s) {
			t.Errorf("the refusal of the invalidated slot does not say %q:\n%s", s, refused.log())
		}
	}

	// The standby is rebuilt: the slot is gone, refused as lost.
	sp.rebuild(t)
	w.url = sp.standbyApp
	lost := w.start(t, "--primary-url", sp.primaryApp)
	if code := lost.wait(t, time.Minute); code != exitError {
		t.Fatalf("run on the rebuilt standby: exit %d, want %d; log:\n%s", code, exitError, lost.log())
	}
	for _, s := range []string{"is gone", "--backfill-where"} {
		if !strings.Contains(lost.log(), s) {
			t.Errorf("the refusal of the rebuilt standby's missing slot does not say %q:\n%s", s, lost.log())
		}
	}
	// The recovery: a new slot on the new standby with a backfill of
	// every row, then the stream.
	more := w.write(t, 10, 1000)
	rec := w.start(t, "--primary-url", sp.primaryApp, "--create-slot", "--backfill-where", "true")
	after := w.write(t, 10, 2000)
	all := append(append(append([]int64{}, ids...), more...), after...)
	count, _ = w.consumeAll(t, all, 2*time.Minute)
	if missing, _ := tally(count, all); missing > 0 {
		t.Errorf("%d of %d rows never reached Kafka after the recovery on the rebuilt standby; log:\n%s", missing, len(all), rec.log())
	}
	rec.stop(t)

	// Another standby is promoted (the failover chose the sibling, the
	// primary is gone): the new primary never had the slot, which is
	// refused as lost, and the same recovery works there.
	sibling := testenv.StartStandby(t, sp.primary)
	siblingApp := onDatabase(t, sibling.URL, "app")
	waitFor(t, time.Minute, "the sibling standby replays every row", func() bool {
		return queryBool(t, siblingApp, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, currentLSN(t, sp.primaryApp))
	})
	if err := sp.primary.Stop(t.Context(), "fast"); err != nil {
		t.Fatal(err)
	}
	if err := sibling.Promote(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the sibling promoted", func() bool {
		return queryBool(t, siblingApp, `SELECT NOT pg_is_in_recovery()`)
	})
	w.url = siblingApp
	if w.pool, err = pgxpool.New(t.Context(), siblingApp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pool.Close)
	gone := w.start(t)
	if code := gone.wait(t, time.Minute); code != exitError {
		t.Fatalf("run on the promoted sibling: exit %d, want %d; log:\n%s", code, exitError, gone.log())
	}
	for _, s := range []string{"is gone", "--backfill-where"} {
		if !strings.Contains(gone.log(), s) {
			t.Errorf("the refusal of the slot the promoted sibling never had does not say %q:\n%s", s, gone.log())
		}
	}
	more = w.write(t, 10, 3000)
	rec = w.start(t, "--create-slot", "--backfill-where", "true")
	after = w.write(t, 10, 4000)
	all = append(append(all, more...), after...)
	count, _ = w.consumeAll(t, all, 2*time.Minute)
	if missing, _ := tally(count, all); missing > 0 {
		t.Errorf("%d of %d rows never reached Kafka after the recovery on the promoted sibling; log:\n%s", missing, len(all), rec.log())
	}
	rec.stop(t)
}

// tally counts the ids of want count never saw (missing) and those it
// saw more than once (dups).
func tally(count map[int64]int, want []int64) (missing, dups int) {
	for _, id := range want {
		switch n := count[id]; {
		case n == 0:
			missing++
		case n > 1:
			dups++
		}
	}
	return missing, dups
}

// currentLSN is the server's current WAL position.
func currentLSN(t *testing.T, url string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var lsn string
	if err := conn.QueryRow(t.Context(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}
