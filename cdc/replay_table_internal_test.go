package cdc

import (
	"testing"

	"github.com/outboxd/outboxd/slot"
)

// Issue 53: the SQL a replay resumes with: the rows after a cursor, and
// those at or before its upper bound, in (ordering column, id) order with
// NULLs of the ordering column last.
func TestReplayCursorConditions(t *testing.T) {
	t.Parallel()
	byID := &replayTable{backfillTable: backfillTable{order: "id", id: "id"}, idType: "bigint"}
	byTime := &replayTable{backfillTable: backfillTable{order: "created_at", id: "id"}, idType: "uuid", orderType: "timestamp with time zone"}
	tests := []struct {
		name  string
		t     *replayTable
		c     slot.Cursor
		after bool
		want  string
		args  []any
	}{
		{"after an id", byID, slot.Cursor{ID: "42"}, true, `"id" > $1::text::bigint`, []any{"42"}},
		{"up to an id", byID, slot.Cursor{ID: "42"}, false, `"id" <= $1::text::bigint`, []any{"42"}},
		{"after a time", byTime, slot.Cursor{Order: "t1", ID: "u1"}, true,
			`("created_at" > $1::text::timestamp with time zone OR ("created_at" = $1::text::timestamp with time zone AND "id" > $2::text::uuid) OR "created_at" IS NULL)`, []any{"t1", "u1"}},
		{"after a row without a time", byTime, slot.Cursor{OrderNull: true, ID: "u1"}, true,
			`("created_at" IS NULL AND "id" > $1::text::uuid)`, []any{"u1"}},
		{"up to a time", byTime, slot.Cursor{Order: "t1", ID: "u1"}, false,
			`("created_at" < $1::text::timestamp with time zone OR ("created_at" = $1::text::timestamp with time zone AND "id" <= $2::text::uuid))`, []any{"t1", "u1"}},
		{"up to a row without a time", byTime, slot.Cursor{OrderNull: true, ID: "u1"}, false,
			`("created_at" IS NOT NULL OR "id" <= $1::text::uuid)`, []any{"u1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var args []any
			if got := tt.t.cursorCond(tt.c, tt.after, &args); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if len(args) != len(tt.args) {
				t.Fatalf("args %v, want %v", args, tt.args)
			}
			for i := range args {
				if args[i] != tt.args[i] {
					t.Errorf("args %v, want %v", args, tt.args)
				}
			}
		})
	}
}

// Issue 53: the relations a selection's plan reads, nested plans too.
func TestPlanRelations(t *testing.T) {
	t.Parallel()
	plan := `[{"Plan": {"Node Type": "Hash Join", "Plans": [
		{"Node Type": "Seq Scan", "Relation Name": "outbox", "Schema": "public"},
		{"Node Type": "Hash", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "other", "Schema": "app"}]}]}}]`
	got, err := planRelations([]byte(plan))
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"public", "outbox"}, {"app", "other"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("planRelations = %v, want %v", got, want)
	}
	// What cannot be read is refused, never taken for a plan reading nothing.
	if got, err := planRelations([]byte("not json")); err == nil {
		t.Errorf("planRelations of no plan = %v, want an error", got)
	}
}
