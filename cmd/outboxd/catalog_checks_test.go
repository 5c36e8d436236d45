package main

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/harness/testenv"
)

// outboxd runs the binary with args (and env added to the environment),
// returning the exit code and what it wrote to stdout and stderr. A
// command still running after 30 s (a run that streams where it should
// have refused to) is killed: exit code -1.
func outboxd(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, builtBinary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return exitCode(err), out.String(), errOut.String()
}

func poolFor(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func publicationTables(t *testing.T, pool *pgxpool.Pool, publication string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1`, publication)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

// TestMigrateRefusesTableNotInPublication is the regression test of issue
// 37 bug 13 (a table silently not published): `migrate --own-table
// --table app_events_v2` exited 0 while the existing publication covered
// another table, and `--own-table` without `--table` "applied" migrations
// for a public.outbox that does not exist. migrate now exits 1 naming the
// fix, changes no publication, and passes once the fix is applied; `run
// --table` refuses such a publication too.
func TestMigrateRefusesTableNotInPublication(t *testing.T) {
	t.Parallel()
	db := testenv.Database(t)
	pool := poolFor(t, db)
	slotName := testenv.Name(t, "slot")
	// The application's first outbox, migrated and published.
	if _, err := pool.Exec(t.Context(), `CREATE TABLE app_events (id bigserial PRIMARY KEY, aggregate_id uuid NOT NULL, topic text NOT NULL, payload jsonb NOT NULL, headers jsonb);
		CREATE TABLE app_events_v2 (LIKE app_events INCLUDING ALL)`); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := outboxd(t, nil, "migrate", "--database-url", db, "--slot", slotName, "--own-table", "--table", "app_events", "--create-slot=false"); code != exitOK {
		t.Fatalf("migrate --own-table --table app_events: exit %d\n%s%s", code, out, errOut)
	}

	t.Run("another table", func(t *testing.T) {
		code, out, errOut := outboxd(t, nil, "migrate", "--database-url", db, "--slot", slotName, "--own-table", "--table", "app_events_v2", "--create-slot=false")
		fix := "ALTER PUBLICATION outboxd ADD TABLE public.app_events_v2"
		if code != exitError || !strings.Contains(errOut, fix) {
			t.Fatalf("migrate --own-table --table app_events_v2 over a publication of app_events: exit %d, want %d naming %q:\n%s%s", code, exitError, fix, out, errOut)
		}
		if got := publicationTables(t, pool, "outboxd"); len(got) != 1 || got[0] != "public.app_events" {
			t.Errorf("migrate changed the publication: it publishes %v, want [public.app_events]", got)
		}
		// run --table refuses it as well, before touching the slot.
		code, _, errOut = outboxd(t, []string{"OUTBOXD_DATABASE_URL=" + db, "OUTBOXD_BROKERS=" + strings.Join(testenv.Brokers(t), ",")},
			"run", "--slot", slotName, "--table", "app_events_v2", "--create-slot")
		if code != exitError || !strings.Contains(errOut, "ALTER PUBLICATION") || !strings.Contains(errOut, "app_events_v2") {
			t.Fatalf("run --table app_events_v2 over a publication of app_events: exit %d, want %d naming the ALTER PUBLICATION:\n%s", code, exitError, errOut)
		}
		var slots int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slotName).Scan(&slots); err != nil || slots != 0 {
			t.Errorf("run refused the publication yet created the slot (%d slots, %v)", slots, err)
		}
		// The fix it names works.
		if _, err := pool.Exec(t.Context(), fix); err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := outboxd(t, nil, "migrate", "--database-url", db, "--slot", slotName, "--own-table", "--table", "app_events_v2", "--create-slot=false"); code != exitOK {
			t.Fatalf("migrate after %s: exit %d\n%s%s", fix, code, out, errOut)
		}
	})

	t.Run("no such table", func(t *testing.T) {
		code, out, errOut := outboxd(t, nil, "migrate", "--database-url", db, "--slot", slotName, "--own-table", "--create-slot=false")
		if code != exitError || !strings.Contains(errOut, "public.outbox") || !strings.Contains(errOut, "does not exist") || !strings.Contains(errOut, "--table") {
			t.Fatalf("migrate --own-table without --table or a public.outbox: exit %d, want %d saying public.outbox does not exist and to give --table:\n%s%s", code, exitError, out, errOut)
		}
		var recorded int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outboxd_migrations WHERE target LIKE 'table=public.outbox %'`).Scan(&recorded); err != nil || recorded != 0 {
			t.Errorf("migrate recorded %d migrations (%v) for a table that does not exist", recorded, err)
		}
	})
}

// dbName is the database of a URL.
func dbName(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// TestSlotOfAnotherDatabaseRefused is the regression test of issue 37 bug
// 16 (migrate and status accept another database's slot): slot names are
// per server, and `migrate` in a second database with the first one's slot
// name adopted that slot (exit 0, recorded in its outboxd_slots), and
// `status` showed it as its own. migrate, status and run --create-slot
// now refuse it, naming the slot and its database, and record nothing.
func TestSlotOfAnotherDatabaseRefused(t *testing.T) {
	t.Parallel()
	first, second := testenv.Database(t), testenv.Database(t)
	slotName := testenv.Name(t, "slot")
	if code, out, errOut := outboxd(t, nil, "migrate", "--database-url", first, "--slot", slotName); code != exitOK {
		t.Fatalf("migrate on the first database: exit %d\n%s%s", code, out, errOut)
	}
	firstName := dbName(t, first)
	pool := poolFor(t, second)
	unrecorded := func(t *testing.T, after string) {
		t.Helper()
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outboxd_slots WHERE slot_name = $1`, slotName).Scan(&n); err != nil || n != 0 {
			t.Errorf("after %s the second database's outboxd_slots records the first one's slot (%d rows, %v)", after, n, err)
		}
	}

	code, out, errOut := outboxd(t, nil, "migrate", "--database-url", second, "--slot", slotName)
	if code != exitError || !strings.Contains(errOut, slotName) || !strings.Contains(errOut, firstName) || !strings.Contains(errOut, "choose another --slot") {
		t.Fatalf("migrate on a second database with the first one's slot name: exit %d, want %d naming the slot, database %s and --slot:\n%s%s", code, exitError, firstName, out, errOut)
	}
	unrecorded(t, "migrate")

	code, out, errOut = outboxd(t, nil, "status", "--database-url", second, "--slot", slotName)
	if code != exitError || !strings.Contains(errOut, "belongs to database \""+firstName+"\"") || !strings.Contains(out, "another database") {
		t.Errorf("status on the second database of the first one's slot: exit %d, want %d reporting it as another database's:\n%s%s", code, exitError, out, errOut)
	}
	code, out, _ = outboxd(t, nil, "status", "--database-url", second, "--slot", slotName, "--json")
	var st struct {
		Database        string `json:"database"`
		CurrentDatabase string `json:"current_database"`
		OtherDatabase   bool   `json:"other_database"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != exitError || !st.OtherDatabase || st.Database != firstName || st.CurrentDatabase != dbName(t, second) {
		t.Errorf("status --json: exit %d, %+v (%v), want 1 with other_database true:\n%s", code, st, err, out)
	}

	// run --create-slot refused it already (when streaming), but first
	// recorded it as adopted.
	code, _, errOut = outboxd(t, []string{"OUTBOXD_DATABASE_URL=" + second, "OUTBOXD_BROKERS=" + strings.Join(testenv.Brokers(t), ",")},
		"run", "--slot", slotName, "--create-slot")
	if code != exitError || !strings.Contains(errOut, firstName) {
		t.Errorf("run --create-slot on the second database: exit %d, want %d naming database %s:\n%s", code, exitError, firstName, errOut)
	}
	unrecorded(t, "run --create-slot")

	// The first database's own slot is still its own.
	if code, out, errOut := outboxd(t, nil, "status", "--database-url", first, "--slot", slotName); code != exitOK || strings.Contains(out, "another database") {
		t.Errorf("status on the first database: exit %d:\n%s%s", code, out, errOut)
	}
}
