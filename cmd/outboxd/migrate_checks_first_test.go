package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
)

// Regression (issue 37): migrate --own-table created the publication,
// outboxd_slots and outboxd_emit before it checked that the table's columns
// fit the mapping, so a failed first try left them behind. It checks first.
func TestMigrateOwnTableChecksTheMappingFirst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, conn := databaseConn(t)
	if _, err := conn.Exec(ctx, `CREATE TABLE app_events (event_id uuid PRIMARY KEY, stream text, body jsonb)`); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, builtBinary, "migrate", "--database-url", db, "--own-table", "--table", "app_events",
		"--id-column", "event_id", "--key-column", "stream", "--payload-column", "body", "--publication", "app", "--create-slot=false").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "topic") {
		t.Fatalf("migrate of a table without a topic column: exit %d, want 1 naming the missing column:\n%s", code, out)
	}
	var left []string
	if err := conn.QueryRow(ctx, `SELECT array_remove(ARRAY[
			(SELECT 'publication app' FROM pg_publication WHERE pubname = 'app'),
			(SELECT 'outboxd_slots' WHERE to_regclass('outboxd_slots') IS NOT NULL),
			(SELECT 'outboxd_migrations' WHERE to_regclass('outboxd_migrations') IS NOT NULL),
			(SELECT 'outboxd_emit' FROM pg_proc WHERE proname = 'outboxd_emit' LIMIT 1)], NULL)`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("a failed migrate left %v behind", left)
	}
}

// leftBehind lists what a migrate that refused to start must not have
// made in the database: the publication named publication, outboxd's
// tables and functions.
func leftBehind(t *testing.T, conn *pgx.Conn, publication string) []string {
	t.Helper()
	var left []string
	if err := conn.QueryRow(t.Context(), `SELECT array_remove(ARRAY[
			(SELECT 'publication ' || pubname FROM pg_publication WHERE pubname = $1),
			(SELECT 'outboxd_slots' WHERE to_regclass('outboxd_slots') IS NOT NULL),
			(SELECT 'outboxd_migrations' WHERE to_regclass('outboxd_migrations') IS NOT NULL),
			(SELECT 'outboxd_emit' FROM pg_proc WHERE proname = 'outboxd_emit' LIMIT 1)], NULL)`, publication).Scan(&left); err != nil {
		t.Fatal(err)
	}
	return left
}

// TestMigrateRefusesATableOfAnotherShapeFirst is issue 49, item 19: migrate
// without --own-table on an existing table of another shape recorded
// migrations 0001 and 0002 as applied (creating the publication), then
// failed at 0003 (column "topic" does not exist) without naming
// --own-table. It refuses before anything is applied, naming the flag.
func TestMigrateRefusesATableOfAnotherShapeFirst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, conn := databaseConn(t)
	if _, err := conn.Exec(ctx, `CREATE TABLE svc_events (event_id uuid PRIMARY KEY, aggregate text, kind text, body jsonb, created_at timestamptz DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, builtBinary, "migrate", "--database-url", db, "--table", "svc_events").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "--own-table") || !strings.Contains(string(out), "not outboxd's default outbox table") {
		t.Fatalf("migrate of an existing table of another shape: exit %d, want 1 naming --own-table:\n%s", code, out)
	}
	if left := leftBehind(t, conn, "outboxd"); len(left) > 0 {
		t.Errorf("a refused migrate left %v behind", left)
	}
}

// TestMigrateSaysItNeedsReplication is issue 49, item 20: run as the
// table's owner without REPLICATION, migrate applied the migrations and
// then failed on the replication connection with the driver's error,
// whose first line was about TLS. It checks the privilege before it
// applies anything and says what to do; with --create-slot=false it
// needs none.
func TestMigrateSaysItNeedsReplication(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, conn := databaseConn(t)
	role := testenv.Name(t, "owner")
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN NOREPLICATION`,
		`GRANT CREATE ON DATABASE ` + mustDBName(t, conn) + ` TO ` + role,
		`GRANT CREATE ON SCHEMA public TO ` + role,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(t.Context(), db)
		if err == nil {
			_, _ = c.Exec(t.Context(), `DROP OWNED BY `+role)
			c.Close(t.Context())
		}
	})
	asOwner := strings.Replace(db, "postgres://postgres@", "postgres://"+role+"@", 1)
	out, err := exec.CommandContext(ctx, builtBinary, "migrate", "--database-url", asOwner).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "may not open a replication connection") ||
		!strings.Contains(string(out), "REPLICATION") || !strings.Contains(string(out), "--create-slot=false") {
		t.Fatalf("migrate as a role without REPLICATION: exit %d, want 1 saying it needs REPLICATION or --create-slot=false:\n%s", code, out)
	}
	if strings.Contains(string(out), "TLS") {
		t.Errorf("the error speaks of TLS, which is not the problem:\n%s", out)
	}
	if left := leftBehind(t, conn, "outboxd"); len(left) > 0 {
		t.Errorf("a refused migrate left %v behind", left)
	}
	if out, err := exec.CommandContext(ctx, builtBinary, "migrate", "--database-url", asOwner, "--create-slot=false").CombinedOutput(); err != nil {
		t.Errorf("migrate --create-slot=false as the table's owner: %v\n%s", err, out)
	}
}

// databaseConn is a database of the test's own and a connection to it,
// closed when the test ends.
func databaseConn(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	db := testenv.Database(t)
	conn, err := pgx.Connect(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return db, conn
}

func mustDBName(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var name string
	if err := conn.QueryRow(t.Context(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}
