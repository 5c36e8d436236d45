package cdc_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/layout"
)

// Regression test for issue 37, item 14: a backfill broke per-key order
// for uuid or text ids. Five rows of one key backfilled with `outboxd run
// --create-slot --backfill-where ...` arrived in uuid order (3, 2, 4, 5,
// 1), because the backfill read each table in id order. It must hand them
// over in the order they were written: by the timestamp column or the
// column --backfill-order-column names (ties broken by id); a table with
// neither is refused, naming the flag, before anything is published.
func TestBackfillKeepsPerKeyWriteOrderWithUUIDIds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ordered  bool // the table has occurred_at, set in write order
		cfg      cdc.Config
		refusing bool
	}{
		{"ordered by the timestamp column", true, cdc.Config{Columns: layout.Columns{Timestamp: "occurred_at"}}, false},
		{"ordered by --backfill-order-column", true, cdc.Config{BackfillOrderColumn: "occurred_at"}, false},
		{"refused without an ordering column", false, cdc.Config{}, true},
	}
	// Written in this order; their uuids sort as writes 3, 2, 4, 5, 1.
	ids := []string{
		"50000000-0000-4000-8000-000000000001",
		"20000000-0000-4000-8000-000000000002",
		"10000000-0000-4000-8000-000000000003",
		"30000000-0000-4000-8000-000000000004",
		"40000000-0000-4000-8000-000000000005",
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBed(t, "", nil)
			b.dropSlot(t)
			ddl := `CREATE TABLE uuid_events (id uuid PRIMARY KEY, aggregate_id uuid NOT NULL, topic text NOT NULL, payload jsonb NOT NULL`
			if tt.ordered {
				ddl += `, occurred_at timestamptz NOT NULL DEFAULT clock_timestamp()`
			}
			if _, err := b.pool.Exec(t.Context(), ddl+`);
				CREATE PUBLICATION uuid_pub FOR TABLE uuid_events WITH (publish = 'insert')`); err != nil {
				t.Fatal(err)
			}
			for i, id := range ids { // one writer, one row after the other
				if _, err := b.pool.Exec(t.Context(), `INSERT INTO uuid_events (id, aggregate_id, topic, payload) VALUES ($1, $2, $3, $4)`,
					id, uuidFor(7), b.topic, `{"write": `+strconv.Itoa(i+1)+`}`); err != nil {
					t.Fatal(err)
				}
			}
			cfg := tt.cfg
			cfg.CreateSlot, cfg.BackfillWhere, cfg.Publication = true, "true", "uuid_pub"
			r := b.start(cfg)
			c := b.consume()
			if tt.refusing {
				err := r.wait(30 * time.Second)
				if !errors.Is(err, cdc.ErrBackfillUnordered) || !cdc.IsPermanent(err) {
					t.Fatalf("Run = %v, want a permanent error wrapping ErrBackfillUnordered", err)
				}
				for _, w := range []string{"BackfillOrderColumn", "uuid_events", `id column "id" has type uuid`, "nothing was published"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not say %q:\n%v", w, err)
					}
				}
				if recs := c.settle(t, 2*time.Second); len(recs) != 0 {
					t.Errorf("%d records published by a refused backfill, want none", len(recs))
				}
				return
			}
			recs := c.until(t, len(ids), time.Minute)
			waitForState(t, r, cdc.StateStreaming)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rec := range recs {
				id, _ := header(rec, "id")
				got = append(got, id)
			}
			if strings.Join(got, " ") != strings.Join(ids, " ") {
				t.Errorf("key %s backfilled in the order\n%s\nwant the written order\n%s", uuidFor(7), strings.Join(got, "\n"), strings.Join(ids, "\n"))
			}
		})
	}
}

// Regression (issue 37, review): re-running a pending backfill dropped the
// slot first and only then found the table's order could not be kept; the
// next start then met a lost slot. The check comes before anything is
// dropped: the refused re-run leaves the slot and its record as they were.
func TestUnorderedBackfillRerunKeepsTheSlot(t *testing.T) {
	t.Parallel()
	b := newBed(t, "", nil)
	if _, err := b.pool.Exec(t.Context(), `CREATE TABLE uuid_events (id uuid PRIMARY KEY, aggregate_id uuid NOT NULL, topic text NOT NULL, payload jsonb NOT NULL);
		CREATE PUBLICATION uuid_pub FOR TABLE uuid_events WITH (publish = 'insert')`); err != nil {
		t.Fatal(err)
	}
	// What a first start that crashed mid-backfill leaves: the slot and a
	// pending record.
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO outboxd_slots (slot_name, system_identifier, timeline, created_by, backfill_where)
		VALUES ($1, (SELECT system_identifier::text FROM pg_control_system()), 1, 'run --create-slot', 'true')`, b.slot); err != nil {
		t.Fatal(err)
	}
	err := b.start(cdc.Config{Publication: "uuid_pub"}).wait(time.Minute)
	if !errors.Is(err, cdc.ErrBackfillUnordered) || !cdc.IsPermanent(err) {
		t.Fatalf("Run = %v, want a permanent error wrapping ErrBackfillUnordered", err)
	}
	if !b.slotExists(t) {
		t.Error("the slot was dropped for a backfill that was then refused")
	}
}
