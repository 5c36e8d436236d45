package cdc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/outbox"
)

// Issue 37, item 14: the rule that chooses the column a table's backfill
// is read in order of, so each key's rows are published in the order they
// were written; a table with nothing that gives it is refused naming
// --backfill-order-column.
func TestBackfillOrderRule(t *testing.T) {
	seqID := tableColumn{name: "id", typeOID: pgtype.Int8OID, sequence: true}
	created := tableColumn{name: "created_at", typeOID: pgtype.TimestamptzOID}
	occurred := tableColumn{name: "occurred_at", typeOID: pgtype.TimestampOID}
	uuidID := tableColumn{name: "id", typeOID: pgtype.UUIDOID}
	tests := []struct {
		name             string
		cols             []tableColumn
		timestamp, order string
		want             string   // the ordering column; "" when refused
		errWants         []string // what the refusal says
	}{
		{name: "default table: a bigserial id", cols: []tableColumn{seqID, created}, want: "id"},
		{name: "an identity integer id", cols: []tableColumn{{name: "id", typeOID: pgtype.Int4OID, sequence: true}}, want: "id"},
		{name: "a sequence id wins over the timestamp column", cols: []tableColumn{seqID, occurred}, timestamp: "occurred_at", want: "id"},
		{name: "uuid id, the timestamp column", cols: []tableColumn{uuidID, occurred}, timestamp: "occurred_at", want: "occurred_at"},
		{name: "uuid id, the ordering column", cols: []tableColumn{uuidID, created}, order: "created_at", want: "created_at"},
		{name: "the ordering column wins over the id", cols: []tableColumn{seqID, created}, order: "created_at", want: "created_at"},
		{name: "the ordering column wins over the timestamp column", cols: []tableColumn{uuidID, created, occurred}, timestamp: "occurred_at", order: "created_at", want: "created_at"},
		{name: "an integer ordering column", cols: []tableColumn{{name: "id", typeOID: pgtype.TextOID}, {name: "seq", typeOID: pgtype.Int8OID}}, order: "seq", want: "seq"},
		{name: "uuid id alone", cols: []tableColumn{uuidID, created},
			errWants: []string{`id column "id" has type uuid`, "no --timestamp-column is given", "--backfill-order-column"}},
		{name: "text id alone", cols: []tableColumn{{name: "id", typeOID: pgtype.TextOID}}, errWants: []string{"type text", "--backfill-order-column"}},
		{name: "varchar id alone", cols: []tableColumn{{name: "id", typeOID: pgtype.VarcharOID}}, errWants: []string{"type character varying", "--backfill-order-column"}},
		{name: "an integer id the application assigns", cols: []tableColumn{{name: "id", typeOID: pgtype.Int8OID}},
			errWants: []string{"not filled from a sequence", "--backfill-order-column"}},
		{name: "uuid id, the table lacks the timestamp column", cols: []tableColumn{uuidID}, timestamp: "occurred_at",
			errWants: []string{`the table has no timestamptz or timestamp column "occurred_at" (--timestamp-column)`, "--backfill-order-column"}},
		{name: "the ordering column missing", cols: []tableColumn{seqID}, order: "created_at",
			errWants: []string{`has no column "created_at" (--backfill-order-column)`}},
		{name: "an ordering column of another type", cols: []tableColumn{uuidID, {name: "v7", typeOID: pgtype.UUIDOID}}, order: "v7",
			errWants: []string{`ordering column "v7" (--backfill-order-column) has type uuid`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := backfillOrder(`"public"."t"`, tt.cols, "id", tt.timestamp, tt.order)
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
	tbl := backfillTable{name: pgx.Identifier{"app", "Events"}, columns: []outbox.Column{{Name: "id"}, {Name: "pay\"load"}}}
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

// tableColumns tells a sequence-filled id (serial, identity, a partition
// of a table whose id is one) from one the application assigns, on the
// real catalog; a column list leaves the ordering column readable.
func TestTableColumnsSeesSequences(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE serial_id (id bigserial PRIMARY KEY, at timestamptz);
		CREATE TABLE identity_id (id int GENERATED ALWAYS AS IDENTITY, at timestamptz);
		CREATE SEQUENCE own_seq;
		CREATE TABLE default_id (id bigint DEFAULT nextval('own_seq'));
		CREATE TABLE assigned_id (id bigint PRIMARY KEY, at timestamptz);
		CREATE TABLE uuid_id (id uuid PRIMARY KEY, at timestamptz);
		CREATE TABLE parted (id bigserial, at timestamptz NOT NULL) PARTITION BY RANGE (at);
		CREATE TABLE attached (at timestamptz NOT NULL, id bigint NOT NULL);
		ALTER TABLE parted ATTACH PARTITION attached FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]bool{"serial_id": true, "identity_id": true, "default_id": true, "assigned_id": false, "uuid_id": false, "parted": true, "attached": true} {
		cols, err := tableColumns(t.Context(), conn, pgx.Identifier{"public", table})
		if err != nil {
			t.Fatal(err)
		}
		got, found := false, false
		for _, c := range cols {
			if c.name == "id" {
				got, found = c.sequence, true
			}
		}
		if !found || got != want {
			t.Errorf("%s: id found %v, filled from a sequence %v; want %v", table, found, got, want)
		}
	}
}
