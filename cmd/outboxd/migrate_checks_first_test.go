package main

import (
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
	db := testenv.Database(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
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
