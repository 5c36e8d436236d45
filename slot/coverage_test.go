package slot_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/slot"
)

// TestReadCoverage is the catalog side of the regression test of issue 37
// bug 13 (a table silently not published): whether a publication publishes
// a table, against the real PostgreSQL, for every way a publication can
// take a table in: FOR TABLE, FOR ALL TABLES, FOR TABLES IN SCHEMA, and a
// partitioned table with or without publish_via_partition_root.
func TestReadCoverage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `
		CREATE SCHEMA app;
		CREATE TABLE app.events (id bigint);
		CREATE TABLE app."Odd Name" (id bigint);
		CREATE TABLE public.other (id bigint);
		CREATE TABLE public.parts (id bigint, d date) PARTITION BY RANGE (d);
		CREATE TABLE public.parts_1 PARTITION OF public.parts FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
		CREATE TABLE public.parts_2 PARTITION OF public.parts FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
		CREATE PUBLICATION p_other FOR TABLE public.other;
		CREATE PUBLICATION p_events FOR TABLE app.events;
		CREATE PUBLICATION p_all FOR ALL TABLES;
		CREATE PUBLICATION p_schema FOR TABLES IN SCHEMA app;
		CREATE PUBLICATION p_leaves FOR TABLE public.parts;
		CREATE PUBLICATION p_root FOR TABLE public.parts WITH (publish_via_partition_root = true);
		CREATE PUBLICATION p_one_leaf FOR TABLE public.parts_1;`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		publication, table string
		exists, published  bool
		name               string // Coverage.Table when the table exists
	}{
		{"p_events", "app.events", true, true, "app.events"},
		{"p_other", "app.events", true, false, "app.events"},
		{"p_all", "app.events", true, true, "app.events"},
		{"p_all", "other", true, true, "public.other"},
		{"p_schema", "app.events", true, true, "app.events"},
		{"p_schema", `app."Odd Name"`, true, true, `app."Odd Name"`},
		{"p_schema", "public.other", true, false, "public.other"},
		{"p_leaves", "public.parts", true, true, "public.parts"},
		{"p_root", "public.parts", true, true, "public.parts"},
		{"p_one_leaf", "public.parts", true, false, "public.parts"},
		{"p_events", "app.missing", false, false, ""},
		{"no_such_publication", "app.events", true, false, "app.events"},
	} {
		c, err := slot.ReadCoverage(ctx, conn, tc.publication, tc.table)
		if err != nil {
			t.Fatalf("ReadCoverage(%s, %s): %v", tc.publication, tc.table, err)
		}
		if c.Exists != tc.exists || c.Published != tc.published || c.Table != tc.name {
			t.Errorf("ReadCoverage(%s, %s) = %+v, want exists %v, published %v, table %q", tc.publication, tc.table, c, tc.exists, tc.published, tc.name)
		}
		err = slot.CheckCovers(ctx, conn, tc.publication, tc.table, field.Names{})
		switch {
		case !tc.exists:
			if !errors.Is(err, slot.ErrTableMissing) || !slot.Permanent(err) {
				t.Errorf("CheckCovers(%s, %s) = %v, want ErrTableMissing", tc.publication, tc.table, err)
			}
		case !tc.published:
			fix := "ALTER PUBLICATION " + tc.publication + " ADD TABLE " + tc.name
			if !errors.Is(err, slot.ErrTableNotPublished) || !slot.Permanent(err) || !strings.Contains(err.Error(), fix) {
				t.Errorf("CheckCovers(%s, %s) = %v, want ErrTableNotPublished naming %q", tc.publication, tc.table, err, fix)
			}
		case err != nil:
			t.Errorf("CheckCovers(%s, %s) = %v, want nil", tc.publication, tc.table, err)
		}
	}
}
