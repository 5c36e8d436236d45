package slot_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/slot"
)

// Regression (issue 37): outboxd_slots was trusted with no word on who may
// write it; a role that can UPDATE it can forge a pending backfill, which
// makes run drop the slot and run the stored predicate. OtherWriters names
// every such role besides run's own and the owner (run warns about them).
func TestOtherWritersOfTheSlotCatalog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.Database(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := migrations.Apply(ctx, conn, migrations.Target{Table: "public.outbox", Publication: "outboxd"}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	writer, reader := testenv.Name(t, "writer"), testenv.Name(t, "reader")
	for _, q := range []string{
		`CREATE ROLE ` + writer, `CREATE ROLE ` + reader,
		`GRANT SELECT ON outboxd_slots TO ` + reader,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		for _, r := range []string{writer, reader} {
			_, _ = c.Exec(context.Background(), `DROP OWNED BY `+r)
			_, _ = c.Exec(context.Background(), `DROP ROLE `+r)
		}
	})
	others, err := slot.OtherWriters(ctx, conn)
	if err != nil || slices.Contains(others, writer) || slices.Contains(others, reader) {
		t.Fatalf("OtherWriters before any grant = %v, %v; want neither test role", others, err)
	}
	for _, priv := range []string{"UPDATE", "INSERT", "DELETE", "TRUNCATE"} {
		if _, err := conn.Exec(ctx, `GRANT `+priv+` ON outboxd_slots TO `+writer); err != nil {
			t.Fatal(err)
		}
		others, err = slot.OtherWriters(ctx, conn)
		if err != nil || !slices.Contains(others, writer) || slices.Contains(others, reader) {
			t.Errorf("OtherWriters with %s granted = %v, %v; want %s named and %s (SELECT only) not", priv, others, err, writer, reader)
		}
		if _, err := conn.Exec(ctx, `REVOKE ALL ON outboxd_slots FROM `+writer); err != nil {
			t.Fatal(err)
		}
	}
}

// Regression (issue 37): a predicate recorded in outboxd_slots was run
// without the checks --backfill-where gets.
func TestCheckBackfillWhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		where, err string
	}{
		{"true", ""},
		{"created_at >= '2026-12-01'", ""},
		{"", "blank"},
		{"  \t\n", "blank"},
		{"id > 1\x00", "NUL"},
	} {
		err := slot.CheckBackfillWhere(tc.where)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("CheckBackfillWhere(%q) = %v, want %q", tc.where, err, tc.err)
		}
	}
}
