package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
)

// doctor runs outboxd doctor with args and returns its exit code and its
// findings (--format json).
func doctor(t *testing.T, args ...string) (int, []finding, string) {
	t.Helper()
	out, err := exec.Command(builtBinary, append([]string{"doctor", "--format", "json"}, args...)...).Output()
	var got struct {
		Findings []finding `json:"findings"`
	}
	if jerr := json.Unmarshal(out, &got); jerr != nil {
		t.Fatalf("outboxd doctor %s: %v, output not JSON (%v):\n%s", strings.Join(args, " "), err, jerr, out)
	}
	return exitCode(err), got.Findings, string(out)
}

// findingOf is the finding of check (of pipeline, "" for any), or nil.
func findingOf(findings []finding, check string) *finding {
	for i := range findings {
		if findings[i].Check == check {
			return &findings[i]
		}
	}
	return nil
}

// Issue 53: outboxd doctor on a ready database finds nothing that would
// stop the pipeline; each problem provoked on the test bed is a failure
// with what to do, and exit 1: a role without REPLICATION, a missing
// publication, a lost slot, a missing topic, a transaction timeout Kafka
// refuses, no broker; a topic of one replica warns. The table format has a
// line a finding.
func TestDoctorFindsWhatWouldStopAPipeline(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	code, findings, out := doctor(t, "--database-url", w.url, "--slot", w.slot, "--brokers", w.brokers)
	if code != 0 {
		t.Fatalf("doctor on a migrated database: exit %d, want 0:\n%s", code, out)
	}
	for _, check := range []string{"wal_level", "max_replication_slots", "max_wal_senders", "replication privilege", "publication", "slot " + w.slot, "kafka"} {
		if f := findingOf(findings, check); f == nil || f.Severity != sevOK {
			t.Errorf("%s on a migrated database: %+v, want ok", check, f)
		}
	}
	text, _ := exec.Command(builtBinary, "doctor", "--database-url", w.url, "--slot", w.slot, "--brokers", w.brokers).Output()
	if lines := strings.Count(string(text), "\n"); lines != len(findings)+1 {
		t.Errorf("the table has %d lines, want a header and one a finding (%d):\n%s", lines, len(findings), text)
	}

	code, findings, out = doctor(t, "--database-url", w.url, "--slot", w.slot, "--brokers", w.brokers, "--publication", "nope")
	if f := findingOf(findings, "publication"); code != 1 || f == nil || f.Severity != sevFail || !strings.Contains(f.Found, "outboxd migrate") {
		t.Errorf("doctor with a publication that does not exist: exit %d, %+v; want 1 and a failure saying to migrate:\n%s", code, f, out)
	}

	role := testenv.Name(t, "plain")
	execOn(t, w.url, `CREATE ROLE `+role+` LOGIN NOREPLICATION`, `GRANT pg_read_all_settings, pg_read_all_stats TO `+role)
	t.Cleanup(func() {
		if c, err := pgx.Connect(t.Context(), w.url); err == nil {
			_, _ = c.Exec(t.Context(), `DROP OWNED BY `+role)
			c.Close(t.Context())
		}
	})
	asRole := strings.Replace(w.url, "postgres://postgres@", "postgres://"+role+"@", 1)
	code, findings, out = doctor(t, "--database-url", asRole, "--slot", w.slot, "--brokers", w.brokers)
	if f := findingOf(findings, "replication privilege"); code != 1 || f == nil || f.Severity != sevFail || !strings.Contains(f.Fix, "ALTER ROLE "+role+" REPLICATION") {
		t.Errorf("doctor as a role without REPLICATION: exit %d, %+v; want 1 and the ALTER ROLE:\n%s", code, f, out)
	}
	// The same role has no grant on outboxd's catalog, and may create
	// nothing in the database (PostgreSQL 15+ grants no CREATE on public).
	if f := findingOf(findings, "privileges for run"); f == nil || f.Severity != sevFail || !strings.Contains(f.Fix, "GRANT SELECT, INSERT, UPDATE ON outboxd_slots TO "+role) {
		t.Errorf("doctor as a role without grants on outboxd_slots: %+v; want a failure with the GRANT:\n%s", f, out)
	}
	if f := findingOf(findings, "privileges for migrate"); f == nil || f.Severity != sevWarn || !strings.Contains(f.Found, "CREATE on database") {
		t.Errorf("doctor as a role that may create nothing: %+v; want a warning naming CREATE on the database:\n%s", f, out)
	}
	execOn(t, w.url, `GRANT SELECT, INSERT, UPDATE ON outboxd_slots TO `+role)
	_, findings, out = doctor(t, "--database-url", asRole, "--slot", w.slot, "--brokers", w.brokers)
	if f := findingOf(findings, "privileges for run"); f == nil || f.Severity != sevWarn || !strings.Contains(f.Fix, "GRANT SELECT ON public.outbox TO "+role) {
		t.Errorf("doctor as a role that may not read the outbox table: %+v; want a warning with the GRANT:\n%s", f, out)
	}

	// Kafka: a dead-letter topic that does not exist fails, one with a
	// single replica (this test bed's one broker) warns; exactly-once's
	// progress topic is created by outboxd; a transaction timeout above
	// the brokers' maximum (15 minutes by default) fails.
	missing := testenv.Name(t, "nodlq")
	code, findings, out = doctor(t, "--database-url", w.url, "--slot", w.slot, "--brokers", w.brokers, "--dead-letter-topic", missing)
	if f := findingOf(findings, "topic "+missing); code != 1 || f == nil || f.Severity != sevFail || !strings.Contains(f.Found, "does not exist") {
		t.Errorf("doctor with a dead-letter topic that does not exist: exit %d, %+v; want 1 and a failure:\n%s", code, f, out)
	}
	code, findings, out = doctor(t, "--database-url", w.url, "--slot", w.slot, "--brokers", w.brokers, "--dead-letter-topic", w.topic)
	if f := findingOf(findings, "topic "+w.topic); code != 0 || f == nil || f.Severity != sevWarn || !strings.Contains(f.Found, "replication factor 1") {
		t.Errorf("doctor with a dead-letter topic of one replica: exit %d, %+v; want 0 and a warning:\n%s", code, f, out)
	}
	progress := testenv.Name(t, "progress")
	code, findings, out = doctor(t, "--database-url", w.url, "--slot", w.slot, "--brokers", w.brokers, "--delivery", "exactly-once", "--progress-topic", progress, "--transaction-timeout", "20m")
	if f := findingOf(findings, "topic "+progress); f == nil || f.Severity != sevOK || !strings.Contains(f.Found, "outboxd creates it") {
		t.Errorf("doctor for exactly-once: the progress topic %+v, want ok, created at start:\n%s", f, out)
	}
	if f := findingOf(findings, "transaction timeout"); code != 1 || f == nil || f.Severity != sevFail || !strings.Contains(f.Found, "transaction.max.timeout.ms") {
		t.Errorf("doctor with --transaction-timeout 20m: exit %d, %+v; want 1, above the brokers' maximum:\n%s", code, f, out)
	}
	code, findings, out = doctor(t, "--database-url", w.url, "--slot", w.slot, "--brokers", "127.0.0.1:1")
	if f := findingOf(findings, "kafka"); code != 1 || f == nil || f.Severity != sevFail {
		t.Errorf("doctor with no broker at --brokers: exit %d, %+v; want 1 and a failure:\n%s", code, f, out)
	}

	execOn(t, w.url, `SELECT pg_drop_replication_slot('`+w.slot+`')`)
	code, findings, out = doctor(t, "--database-url", w.url, "--slot", w.slot, "--brokers", w.brokers)
	if f := findingOf(findings, "slot "+w.slot); code != 1 || f == nil || f.Severity != sevFail || !strings.Contains(f.Found, "is gone") || !strings.Contains(f.Found, "--backfill-where") {
		t.Errorf("doctor on a slot outboxd created and someone dropped: exit %d, %+v; want 1, lost, with the recovery:\n%s", code, f, out)
	}
}

// Issue 53: a pipelines file's pipelines on one server are counted
// together against max_replication_slots: three pipelines whose slots do
// not exist yet on a server with two free fail, each pipeline checked too.
func TestDoctorCountsAFleetsSlotsTogether(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	execOn(t, pg.URL, "ALTER SYSTEM SET max_replication_slots = 2")
	if err := pg.Stop(t.Context(), "fast"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var entries []string
	for i := range 3 {
		db := fmt.Sprintf("app%d", i)
		execOn(t, pg.URL, "CREATE DATABASE "+db)
		url := onDatabase(t, pg.URL, db)
		if out, err := exec.Command(builtBinary, "migrate", "--database-url", url, "--create-slot=false").CombinedOutput(); err != nil {
			t.Fatalf("migrate %s: %v\n%s", db, err, out)
		}
		entries = append(entries, fmt.Sprintf("  - name: p%d\n    database-url: %s\n    slot: s%d\n", i, url, i))
	}
	file := filepath.Join(t.TempDir(), "pipelines.yaml")
	writeFile(t, file, "brokers: "+strings.Join(testenv.Brokers(t), ",")+"\npipelines:\n"+strings.Join(entries, ""))
	code, findings, out := doctor(t, "--config", file)
	f := findingOf(findings, "max_replication_slots")
	if code != 1 || f == nil || f.Severity != sevFail || !strings.Contains(f.Found, "3 more needed by 3 pipelines") || !strings.Contains(f.Fix, "at least 3") {
		t.Errorf("doctor of three pipelines on a server with two slots: exit %d, %+v; want 1, counted together:\n%s", code, f, out)
	}
	for i := range 3 {
		slot := fmt.Sprintf("slot s%d", i)
		var of string
		for _, x := range findings {
			if x.Check == slot {
				of = x.Pipeline
			}
		}
		if of != fmt.Sprintf("p%d", i) {
			t.Errorf("no finding of %s for pipeline p%d:\n%s", slot, i, out)
		}
	}
}
