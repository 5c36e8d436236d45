package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/internal/ops"
)

// freeAddr is an address nothing listens on (for a refused connection).
// A process under test serves metrics on anyPort instead, at the address
// servedAt reads from its log: a port found free here and then given to
// outboxd can be taken in between by any new connection (CI saw "bind:
// address already in use").
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// anyPort is --metrics-addr for a port the kernel picks.
const anyPort = "127.0.0.1:0"

// servingAt finds the address in outboxd's "serving metrics and health"
// line, text or JSON.
var servingAt = regexp.MustCompile(`serving metrics and health"?[ ,]*"?addr"?[=:]"?([^\s"]+)`)

// servedAt waits for a process started with --metrics-addr anyPort to
// serve metrics, and returns the address it listens on; log is its log.
func servedAt(t *testing.T, log func() string) string {
	t.Helper()
	var addr string
	waitFor(t, 30*time.Second, "metrics served", func() bool {
		if m := servingAt.FindStringSubmatch(log()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return addr
}

func get(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of pipeline's sample of series, or -1. Series
// is a name and its other labels as /metrics writes them
// (outboxd_state{state="streaming"}): outboxd writes the label
// pipeline="NAME" (run's: its slot) among them, in order of name.
func metric(body, pipeline, series string) float64 {
	name, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	all := []string{fmt.Sprintf("pipeline=%q", pipeline)}
	if labels != "" {
		all = append(all, strings.Split(labels, ",")...)
	}
	slices.Sort(all)
	line := name + "{" + strings.Join(all, ",") + "} "
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, line); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

var waitFor = testenv.Eventually

// TestMetricsAndHealthFollowTheStream: metrics move as events flow, the
// process is healthy and ready while streaming; a standby on the same slot
// is healthy and ready too (issue 49: readiness is the process's), and
// says standby in outboxd_state.
func TestMetricsAndHealthFollowTheStream(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(t, "--metrics-addr", anyPort)
	addr := servedAt(t, p.log)
	waitFor(t, 30*time.Second, "readyz 200", func() bool { code, _ := get(addr, "/readyz"); return code == 200 })
	if code, _ := get(addr, "/healthz"); code != 200 {
		t.Errorf("healthz = %d", code)
	}
	ids := w.write(t, 4, 0) // 20 rows
	w.consumeAll(t, ids, time.Minute)
	var body string
	waitFor(t, 10*time.Second, "metrics counting 20 records", func() bool {
		_, body = get(addr, "/metrics")
		return metric(body, w.slot, fmt.Sprintf(`outboxd_records_published_total{topic="%s"}`, w.topic)) == 20
	})
	// Issue 49, item 29: no metric said which build a replica runs.
	if !regexp.MustCompile(`(?m)^outboxd_build_info\{goversion="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`).MatchString(body) {
		t.Errorf("/metrics has no outboxd_build_info with the build's version and Go version:\n%s", body)
	}
	for name, min := range map[string]float64{
		fmt.Sprintf(`outboxd_bytes_published_total{topic="%s"}`, w.topic): 20 * 36, // key (36) + payload
		`outboxd_transactions_total`:                                      4,
		`outboxd_confirmed_lsn`:                                           1,
		`outboxd_state{state="streaming"}`:                                1,
		`outboxd_produce_latency_seconds_count`:                           20,
		`outboxd_commit_to_ack_seconds_count`:                             20,
		`outboxd_commit_to_receive_seconds_count`:                         4,
		`outboxd_commit_to_send_seconds_count`:                            4,
	} {
		if v := metric(body, w.slot, name); v < min {
			t.Errorf("%s = %v, want at least %v", name, v, min)
		}
	}
	for _, name := range []string{"outboxd_in_flight_records", "outboxd_in_flight_bytes", "outboxd_replication_lag_bytes", "outboxd_replication_lag_seconds", "outboxd_reconnects_total", `outboxd_errors_total{kind="permanent"}`} {
		if v := metric(body, w.slot, name); v < 0 {
			t.Errorf("%s missing or negative (%v)", name, v)
		}
	}
	// GET /pipelines lists run's one pipeline, named after its slot.
	code, pbody := get(addr, "/pipelines")
	var st ops.Status
	if err := json.Unmarshal([]byte(pbody), &st); code != 200 || err != nil || len(st.Pipelines) != 1 ||
		st.Pipelines[0].Name != w.slot || st.Pipelines[0].State != "streaming" || st.Pipelines[0].ConfirmedLSN == "0/0" {
		t.Errorf("GET /pipelines = %d %s (%v), want the pipeline %s streaming with a confirmed position", code, pbody, err, w.slot)
	}
	// The WAL monitor checks once at start: -1 ("not checked yet") must not last.
	waitFor(t, 30*time.Second, "outboxd_slot_retained_wal_bytes checked", func() bool {
		_, body := get(addr, "/metrics")
		return metric(body, w.slot, "outboxd_slot_retained_wal_bytes") >= 0
	})

	standby := w.start(t, "--metrics-addr", anyPort)
	standbyAddr := servedAt(t, standby.log)
	waitFor(t, 30*time.Second, "standby standing by", func() bool { return strings.Contains(standby.log(), "standing by") })
	if code, _ := get(standbyAddr, "/healthz"); code != 200 {
		t.Errorf("standby healthz = %d, want 200", code)
	}
	if code, body := get(standbyAddr, "/readyz"); code != 200 || body != "ready: 1 pipeline (standby)\n" {
		t.Errorf("standby readyz = %d %q, want 200 ready: 1 pipeline (standby)", code, body)
	}
	_, sbody := get(standbyAddr, "/metrics")
	if metric(sbody, w.slot, `outboxd_state{state="standby"}`) != 1 {
		t.Errorf("standby does not report outboxd_state{state=\"standby\"} 1")
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, time.Minute)
	waitFor(t, 30*time.Second, "the standby streaming after the takeover", func() bool {
		_, body := get(standbyAddr, "/metrics")
		return metric(body, w.slot, `outboxd_state{state="streaming"}`) == 1
	})
}

// TestStatusReportsTheSlot runs `outboxd status` against a real slot.
func TestStatusReportsTheSlot(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := newWorld(t)
	status := func(args ...string) (int, string, string) {
		cmd := exec.Command(builtBinary, append([]string{"status", "--database-url", w.url}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		_ = cmd.Run()
		return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
	}
	code, out, stderr := status("--slot", w.slot, "--json")
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, stderr)
	}
	var st struct {
		Slot              string   `json:"slot"`
		Exists            bool     `json:"exists"`
		Active            bool     `json:"active"`
		Confirmed         string   `json:"confirmed_flush_lsn"`
		Retained          int64    `json:"retained_wal_bytes"`
		WALStatus         string   `json:"wal_status"`
		PublicationExists bool     `json:"publication_exists"`
		Tables            []string `json:"tables"`
		Version           int      `json:"server_version_num"`
		Conflicting       *bool    `json:"conflicting"`
		Failover          *bool    `json:"failover"`
		Synced            *bool    `json:"synced"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if !st.Exists || st.Active || st.Confirmed == "" || st.WALStatus == "" || !st.PublicationExists || len(st.Tables) != 1 || st.Tables[0] != "public.outbox" {
		t.Errorf("status of an idle, migrated slot = %+v", st)
	}
	// The columns of newer versions (issue 15): conflicting from 16,
	// failover and synced from 17, where migrate creates a failover slot.
	if (st.Conflicting != nil) != (st.Version >= 160000) || st.Conflicting != nil && *st.Conflicting {
		t.Errorf("status on %d: conflicting = %v", st.Version, st.Conflicting)
	}
	if v17 := st.Version >= 170000; (st.Failover != nil) != v17 || (st.Synced != nil) != v17 || v17 && (!*st.Failover || *st.Synced) {
		t.Errorf("status on %d: failover = %v, synced = %v; want present from 17, a failover slot not synced", st.Version, st.Failover, st.Synced)
	}
	if _, text, _ := status("--slot", w.slot); st.Version >= 170000 && !regexp.MustCompile(`failover\s+yes`).MatchString(text) {
		t.Errorf("status on %d does not show the failover slot:\n%s", st.Version, text)
	}
	p := w.start(t)
	waitFor(t, 30*time.Second, "status shows the slot active", func() bool {
		_, out, _ := status("--slot", w.slot)
		return regexp.MustCompile(`active\s+yes, pid \d+ \(outboxd #[0-9a-f]{8}\)`).MatchString(out)
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, time.Minute)
	if code, _, stderr := status("--slot", "no_such_slot"); code != exitError || !strings.Contains(stderr, "does not exist") {
		t.Errorf("status of a missing slot: exit %d, %q; want 1 and 'does not exist'", code, stderr)
	}
}

// TestInvalidatedSlotStopsWithClearError: a slot PostgreSQL invalidated
// (max_slot_wal_keep_size) is reported by status and stops run; outboxd
// never recreates it and skips events silently.
func TestInvalidatedSlotStopsWithClearError(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	pg := testenv.StartPostgres(t)
	w := &world{url: testenv.DatabaseOn(t, pg.URL), brokers: strings.Join(testenv.Brokers(t), ","), slot: testenv.Name(t, "slot")}
	w.topic = testenv.Topic(t, 1)
	if out, err := exec.Command(builtBinary, "migrate", "--database-url", w.url, "--slot", w.slot).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, w.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{`ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`, `SELECT pg_reload_conf()`,
		`CREATE TABLE filler (x text)`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, time.Minute, "slot invalidated", func() bool {
		_, _ = conn.Exec(ctx, `INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 20000)`)
		_, _ = conn.Exec(ctx, `SELECT pg_switch_wal()`)
		_, _ = conn.Exec(ctx, `CHECKPOINT`)
		var status string
		_ = conn.QueryRow(ctx, `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&status)
		return status == "lost"
	})
	out, _ := exec.Command(builtBinary, "status", "--database-url", w.url, "--slot", w.slot).CombinedOutput()
	if !strings.Contains(string(out), "invalidated") {
		t.Errorf("status does not report the invalidated slot:\n%s", out)
	}
	p := w.start(t)
	if code := p.wait(t, time.Minute); code != exitError {
		t.Fatalf("run on an invalidated slot: exit %d, want %d; log:\n%s", code, exitError, p.log())
	}
	if !strings.Contains(p.log(), "invalidated") || !strings.Contains(p.log(), w.slot) {
		t.Errorf("run's error does not explain the invalidated slot:\n%s", p.log())
	}
	var exists bool
	_ = conn.QueryRow(ctx, `SELECT wal_status = 'lost' FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&exists)
	if !exists {
		t.Errorf("the invalidated slot was recreated or dropped")
	}
}

// TestSIGHUPIsNotACrash.
func TestSIGHUPIsNotACrash(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(t)
	waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(500 * time.Millisecond)
	if done, _ := func() (bool, int) {
		select {
		case <-p.done:
			return true, p.cmd.ProcessState.ExitCode()
		default:
			return false, 0
		}
	}(); done {
		t.Fatalf("outboxd exited on SIGHUP; log:\n%s", p.log())
	}
	ids := w.write(t, 1, 0)
	w.consumeAll(t, ids, time.Minute)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}

// TestWALRetentionWarning: past the threshold the monitor warns and the
// retained WAL shows in the metrics.
func TestWALRetentionWarning(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := newWorld(t)
	p := w.start(t, "--metrics-addr", anyPort, "--wal-check-interval", "200ms", "--wal-retained-warn-bytes", "1")
	addr := servedAt(t, p.log)
	waitFor(t, 30*time.Second, "retention warning", func() bool { return strings.Contains(p.log(), "retains a lot of WAL") })
	_, body := get(addr, "/metrics")
	if v := metric(body, w.slot, "outboxd_slot_retained_wal_bytes"); v <= 0 {
		t.Errorf("outboxd_slot_retained_wal_bytes = %v, want > 0", v)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, time.Minute)
}

// TestLeastPrivilegeRole: run works with a role that has only REPLICATION,
// CONNECT and SELECT, INSERT, UPDATE on outboxd_slots (what docs/operating.md
// documents), heartbeat included, and is refused without the last.
func TestLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := newWorld(t)
	role := testenv.Name(t, "role")
	ctx := t.Context()
	dbName := w.url[strings.LastIndex(w.url, "/")+1:]
	dbName = dbName[:strings.Index(dbName, "?")]
	// PostgreSQL 17 added a fourth argument (flush): docs/operating.md's GRANT
	// names the signature per version.
	emit := "pg_logical_emit_message(boolean, text, text)"
	var version int
	if err := w.pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version >= 170000 {
		emit = "pg_logical_emit_message(boolean, text, text, boolean)"
	}
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN REPLICATION",
		"GRANT CONNECT ON DATABASE " + dbName + " TO " + role,
		"GRANT EXECUTE ON FUNCTION " + emit + " TO " + role,
	} {
		if _, err := w.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = w.pool.Exec(context.Background(), "REVOKE ALL ON DATABASE "+dbName+" FROM "+role)
		_, _ = w.pool.Exec(context.Background(), "REVOKE EXECUTE ON FUNCTION "+emit+" FROM "+role)
		_, _ = w.pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	limited := strings.Replace(w.url, "postgres://postgres@", "postgres://"+role+"@", 1)
	// Without access to outboxd_slots a pending backfill would go unseen:
	// refused, naming the grant.
	denied := w.start(t, "--database-url", limited)
	if code := denied.wait(t, time.Minute); code != exitError || !strings.Contains(denied.log(), "GRANT SELECT, INSERT, UPDATE ON outboxd_slots") && !strings.Contains(denied.log(), "grant SELECT, INSERT, UPDATE ON outboxd_slots") {
		t.Fatalf("run without access to outboxd_slots: exit %d, want %d naming the grant; log:\n%s", code, exitError, denied.log())
	}
	if _, err := w.pool.Exec(ctx, "GRANT SELECT, INSERT, UPDATE ON outboxd_slots TO "+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = w.pool.Exec(context.Background(), "REVOKE ALL ON outboxd_slots FROM "+role) })
	p := w.start(t, "--database-url", limited, "--heartbeat-interval", "200ms", "--metrics-addr", anyPort)
	addr := servedAt(t, p.log)
	ids := w.write(t, 2, 0)
	w.consumeAll(t, ids, time.Minute)
	// The heartbeat must have run, not merely failed quietly.
	waitFor(t, 30*time.Second, "heartbeats written", func() bool {
		_, body := get(addr, "/metrics")
		return metric(body, w.slot, "outboxd_heartbeats_total") >= 3
	})
	if strings.Contains(p.log(), "heartbeat failed") || strings.Contains(p.log(), "level=ERROR") {
		t.Errorf("least-privilege run logged failures:\n%s", p.log())
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("exit %d; log:\n%s", code, p.log())
	}
}
