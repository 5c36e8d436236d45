package cdc

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// Issue 37, item 14: the rule that chooses the column a table's backfill
// is read in order of, so each key's rows are published in the order they
// were written; a table with nothing that gives it is refused naming
// --backfill-order-column.
func TestBackfillOrderRule(t *testing.T) {
	col := func(name string, oid uint32, sequence bool) slot.Column {
		return slot.Column{Column: outbox.Column{Name: name, TypeOID: oid}, Sequence: sequence}
	}
	seqID := col("id", pgtype.Int8OID, true)
	created := col("created_at", pgtype.TimestamptzOID, false)
	occurred := col("occurred_at", pgtype.TimestampOID, false)
	uuidID := col("id", pgtype.UUIDOID, false)
	tests := []struct {
		name             string
		cols             []slot.Column
		timestamp, order string
		want             string   // the ordering column; "" when refused
		errWants         []string // what the refusal says
	}{
		{name: "default table: a bigserial id", cols: []slot.Column{seqID, created}, want: "id"},
		{name: "an identity integer id", cols: []slot.Column{col("id", pgtype.Int4OID, true)}, want: "id"},
		{name: "a sequence id wins over the timestamp column", cols: []slot.Column{seqID, occurred}, timestamp: "occurred_at", want: "id"},
		{name: "uuid id, the timestamp column", cols: []slot.Column{uuidID, occurred}, timestamp: "occurred_at", want: "occurred_at"},
		{name: "uuid id, the ordering column", cols: []slot.Column{uuidID, created}, order: "created_at", want: "created_at"},
		{name: "the ordering column wins over the id", cols: []slot.Column{seqID, created}, order: "created_at", want: "created_at"},
		{name: "the ordering column wins over the timestamp column", cols: []slot.Column{uuidID, created, occurred}, timestamp: "occurred_at", order: "created_at", want: "created_at"},
		{name: "an integer ordering column", cols: []slot.Column{col("id", pgtype.TextOID, false), col("seq", pgtype.Int8OID, false)}, order: "seq", want: "seq"},
		{name: "uuid id alone", cols: []slot.Column{uuidID, created},
			errWants: []string{`id column "id" has type uuid`, "no --timestamp-column is given", "--backfill-order-column"}},
		{name: "text id alone", cols: []slot.Column{col("id", pgtype.TextOID, false)}, errWants: []string{"type text", "--backfill-order-column"}},
		{name: "varchar id alone", cols: []slot.Column{col("id", pgtype.VarcharOID, false)}, errWants: []string{"type character varying", "--backfill-order-column"}},
		{name: "an integer id the application assigns", cols: []slot.Column{col("id", pgtype.Int8OID, false)},
			errWants: []string{"not filled from a sequence", "--backfill-order-column"}},
		{name: "uuid id, the table lacks the timestamp column", cols: []slot.Column{uuidID}, timestamp: "occurred_at",
			errWants: []string{`the table has no timestamptz or timestamp column "occurred_at" (--timestamp-column)`, "--backfill-order-column"}},
		{name: "the ordering column missing", cols: []slot.Column{seqID}, order: "created_at",
			errWants: []string{`has no column "created_at" (--backfill-order-column)`}},
		{name: "an ordering column of another type", cols: []slot.Column{uuidID, col("v7", pgtype.UUIDOID, false)}, order: "v7",
			errWants: []string{`ordering column "v7" (--backfill-order-column) has type uuid`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := backfillOrder(`"public"."t"`, tt.cols, "id", tt.timestamp, tt.order, testNames)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("backfillOrder = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, ErrBackfillUnordered) {
				t.Fatalf("backfillOrder = %q, %v; want an error wrapping ErrBackfillUnordered", got, err)
			}
			for _, w := range append(tt.errWants, `"public"."t"`) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// The ordering column enters the SQL quoted, NULLs last, the id breaking ties.
func TestBackfillSelectOrdersByTheColumnThenID(t *testing.T) {
	tbl := backfillTable{Table: slot.Table{Name: pgx.Identifier{"app", "Events"}, Columns: []slot.Column{
		{Column: outbox.Column{Name: "id"}, Published: true},
		{Column: outbox.Column{Name: "secret"}}, // left out by a column list
		{Column: outbox.Column{Name: "pay\"load"}, Published: true}}}}
	if got, want := tbl.selectSQL("id", "true"), `SELECT "id", "pay""load" FROM "app"."Events" WHERE (true) ORDER BY "id"`; got != want {
		t.Errorf("selectSQL without an ordering column:\n got %s\nwant %s", got, want)
	}
	tbl.order = "id"
	if got, want := tbl.countSQL("id", "true"), `SELECT count(*), 0::int8 FROM "app"."Events" WHERE (true)`; got != want {
		t.Errorf("countSQL ordered by id:\n got %s\nwant %s", got, want)
	}
	tbl.order = `at"; DROP TABLE x; --`
	if got, want := tbl.selectSQL("id", "true"), `SELECT "id", "pay""load" FROM "app"."Events" WHERE (true) ORDER BY "at""; DROP TABLE x; --" NULLS LAST, "id"`; got != want {
		t.Errorf("selectSQL with an ordering column:\n got %s\nwant %s", got, want)
	}
	if got, want := tbl.countSQL("id", "true"), `SELECT count(*), count(*) FILTER (WHERE "at""; DROP TABLE x; --" IS NULL) FROM "app"."Events" WHERE (true)`; got != want {
		t.Errorf("countSQL with an ordering column:\n got %s\nwant %s", got, want)
	}
}

// testNames renders the stream's settings as run's flags do.
var testNames = field.Flags(func(path string) string {
	return map[string]string{"BackfillOrderColumn": "backfill-order-column", "Columns.Timestamp": "timestamp-column"}[path]
})
