package main

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/slot"
)

// Issue 15: failover slots (PostgreSQL 17+), and what outboxd refuses
// around a failover: a standby, an old primary that came back, a slot on a
// promoted standby that was not synchronized.

// serverVersion reads server_version_num.
func serverVersion(t *testing.T, dbURL string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	v, err := slot.ServerVersion(t.Context(), conn)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// onDatabase returns the server URL with another database.
func onDatabase(t *testing.T, server, db string) string {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}

// hostsURL is one URL over several servers' database db, the way users
// list a primary and its standby: libpq and pgx try the hosts in order
// and, with target_session_attrs=read-write, take the first primary.
func hostsURL(t *testing.T, db string, servers ...*testbed.Postgres) string {
	t.Helper()
	var hosts []string
	for _, s := range servers {
		u, err := url.Parse(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, u.Host)
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + db + "?sslmode=disable&target_session_attrs=read-write"
}

func createDatabase(t *testing.T, server, db string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), server)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
}

// standbySlot reads the state of a slot on a standby: whether it is there,
// synchronized from the primary, and persistent (a synchronized slot stays
// temporary, and is dropped at promotion, until the primary's slot has
// moved past what the standby has). A standby that cannot be asked yet
// (it may not have replayed the database) has none.
func standbySlot(t *testing.T, standbyURL, name string) (exists, synced, persistent bool) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), standbyURL)
	if err != nil {
		return false, false, false
	}
	defer conn.Close(context.Background())
	err = conn.QueryRow(t.Context(), `SELECT true, synced, NOT temporary FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&exists, &synced, &persistent)
	if err != nil && err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	return exists, synced, persistent
}

// The proof of issue 15 on PostgreSQL 17+: a primary and a streaming
// standby with slot synchronization (sync_replication_slots on the
// standby, synchronized_standby_slots on the primary), writers running,
// outboxd streaming through one URL naming both hosts. The primary dies
// and the standby is promoted: the same outboxd process continues from the
// synchronized slot with no recovery, and every row the new primary holds
// reaches Kafka, in order per key, with no record of a commit the standby
// never received. Then the old primary comes back as a primary on the old
// timeline: a new outboxd whose URL lists it first refuses it.
func TestFailoverSlotContinuesAfterPromotion(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	primary := testenv.StartPostgres(t)
	if v := serverVersion(t, primary.URL); v < slot.FailoverVersion {
		t.Skipf("failover slots need PostgreSQL 17 or later; this is %d", v)
	}
	standby := testenv.StartStandby(t, primary)
	ctx := t.Context()
	physical, err := os.ReadFile(filepath.Join(standby.Dir, "primary_slot"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, primary.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE DATABASE app",
		"ALTER SYSTEM SET synchronized_standby_slots = '" + strings.TrimSpace(string(physical)) + "'",
		"SELECT pg_reload_conf()",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	admin.Close(ctx)

	both := hostsURL(t, "app", primary, standby)
	w := migratedWorld(t, both)
	status, err := exec.Command(builtBinary, "status", "--database-url", w.url, "--slot", w.slot).CombinedOutput()
	if err != nil || !regexp.MustCompile(`failover\s+yes`).Match(status) {
		t.Fatalf("outboxd status after migrate (%v) does not show a failover slot:\n%s", err, status)
	}
	p := w.start(t, "--wal-check-interval", "200ms")
	ws := startWriters(t, w.url, "outbox", w.topic, 2)
	waitFor(t, time.Minute, "200 rows written", func() bool { return ws.count() >= 200 })
	standbyApp := onDatabase(t, standby.URL, "app")
	waitFor(t, 2*time.Minute, "the slot synchronized to the standby", func() bool {
		exists, synced, persistent := standbySlot(t, standbyApp, w.slot)
		return exists && synced && persistent
	})
	// status on the standby shows its copy of the slot.
	onStandby, err := exec.Command(builtBinary, "status", "--database-url", standbyApp, "--slot", w.slot).CombinedOutput()
	if err != nil || !regexp.MustCompile(`synced\s+yes`).Match(onStandby) || !strings.Contains(string(onStandby), "standby (in recovery)") {
		t.Errorf("outboxd status on the standby (%v) does not show the synchronized slot:\n%s", err, onStandby)
	}
	waitFor(t, time.Minute, "more rows written", func() bool { return ws.count() >= 400 })

	// The primary dies; the standby is promoted. outboxd and the writers
	// find it through the same URL.
	w.pool.Close()
	if err := primary.Stop(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	before := ws.count()
	waitFor(t, 2*time.Minute, "outboxd streaming from the promoted standby", func() bool {
		return strings.Count(p.log(), "msg=streaming") >= 2
	})
	waitFor(t, time.Minute, "writers writing on the new primary", func() bool { return ws.count() > before+100 })
	ws.halt()
	select {
	case <-p.done:
		t.Fatalf("outboxd exited across the failover; log:\n%s", p.log())
	default:
	}
	if w.pool, err = pgxpool.New(ctx, w.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pool.Close)
	want := tableIDs(t, w.pool, "outbox")
	count, byKey := w.consumeByKey(t, want, 2*time.Minute)
	checkKeyOrder(t, byKey)
	have := map[int64]bool{}
	for _, id := range want {
		have[id] = true
	}
	dups, phantoms := 0, 0
	for id, n := range count {
		if n > 1 {
			dups++
		}
		if !have[id] {
			phantoms++
		}
	}
	// synchronized_standby_slots holds back what the primary's walsender
	// sends until the standby has it: no record may be of a commit the
	// promoted standby does not hold.
	if phantoms > 0 {
		t.Errorf("%d records of commits the promoted standby never received", phantoms)
	}
	if strings.Contains(p.log(), "is gone") {
		t.Errorf("outboxd reported the slot lost across the failover; log:\n%s", p.log())
	}
	t.Logf("measured: %d rows on the new primary, all published across the failover with no recovery; %d published twice, %d records of lost commits",
		len(want), dups, phantoms)

	// The old primary comes back, still a primary, on timeline 1. A new
	// outboxd whose URL lists it first would connect to it.
	if err := primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stale := *w
	stale.url = hostsURL(t, "app", primary, standby)
	old := stale.start(t)
	if code := old.wait(t, time.Minute); code != exitError {
		t.Fatalf("run against the old primary: exit %d, want %d; log:\n%s", code, exitError, old.log())
	}
	for _, s := range []string{"old primary", "timeline 1", "timeline 2"} {
		if !strings.Contains(old.log(), s) {
			t.Errorf("the refusal of the old primary does not say %q:\n%s", s, old.log())
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != exitOK {
		t.Errorf("outboxd: exit %d after SIGTERM; log:\n%s", code, p.log())
	}
}

// Decoding on a standby is refused (item 4 of issue 15): run pointed at a
// standby stops with an error that says so and what to do, on every
// version (on 16+ PostgreSQL itself would allow it).
func TestRunRefusesAStandby(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	primary := testenv.StartPostgres(t)
	createDatabase(t, primary.URL, "app")
	w := migratedWorld(t, onDatabase(t, primary.URL, "app"))
	standby := testenv.StartStandby(t, primary)
	onStandby := *w
	onStandby.url = onDatabase(t, standby.URL, "app")
	for _, extra := range [][]string{nil, {"--create-slot"}} {
		p := onStandby.start(t, extra...)
		if code := p.wait(t, time.Minute); code != exitError {
			t.Fatalf("run %v against a standby: exit %d, want %d; log:\n%s", extra, code, exitError, p.log())
		}
		for _, s := range []string{"standby", "in recovery", "target_session_attrs=read-write"} {
			if !strings.Contains(p.log(), s) {
				t.Errorf("run %v against a standby does not say %q:\n%s", extra, s, p.log())
			}
		}
	}
}

// --failover-slot on an existing slot: auto only offers to turn failover
// on (a warning naming the flag), on turns it on (17+), and before 17 on
// is refused naming the version.
func TestFailoverSlotTurnedOnForAnExistingSlot(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := migratedWorld(t, testenv.Database(t), "--failover-slot=off")
	failover := func() bool {
		var on bool
		if err := w.pool.QueryRow(t.Context(), `SELECT failover FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&on); err != nil {
			t.Fatal(err)
		}
		return on
	}
	stopped := func(p *proc) {
		t.Helper()
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t, time.Minute); code != exitOK {
			t.Fatalf("exit %d after SIGTERM; log:\n%s", code, p.log())
		}
	}
	if serverVersion(t, w.url) < slot.FailoverVersion {
		p := w.start(t, "--failover-slot=on")
		if code := p.wait(t, time.Minute); code != exitError || !strings.Contains(p.log(), "needs PostgreSQL 17") {
			t.Fatalf("--failover-slot=on before 17: exit %d, want %d saying it needs 17; log:\n%s", code, exitError, p.log())
		}
		return
	}
	p := w.start(t) // auto
	waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })
	stopped(p)
	if !strings.Contains(p.log(), "--failover-slot=on") || failover() {
		t.Fatalf("--failover-slot=auto on a slot without failover: failover %v, want false and a warning naming --failover-slot=on; log:\n%s", failover(), p.log())
	}
	p = w.start(t, "--failover-slot=on")
	waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })
	stopped(p)
	if !failover() || !strings.Contains(p.log(), "turned failover on") {
		t.Fatalf("--failover-slot=on: failover %v, want true, logged; log:\n%s", failover(), p.log())
	}
}
