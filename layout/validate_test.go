package layout

import (
	"strings"
	"testing"
)

func TestValidateTable(t *testing.T) {
	tests := []struct {
		name string
		cols []Column
		want Columns
		errs []string // empty: valid; otherwise each must be in the error
		n    int      // number of problems reported (lines of the joined error)
	}{
		{name: "default outbox table", cols: outboxColumns(), want: DefaultColumns()},
		{name: "zero Columns means the defaults", cols: outboxColumns()},
		{
			name: "every accepted type",
			cols: []Column{{Name: "id", TypeOID: oidInt2}, {Name: "topic", TypeOID: oidVarchar}, {Name: "aggregate_id", TypeOID: oidText}, {Name: "payload", TypeOID: oidBytea}, {Name: "headers", TypeOID: oidJSON}},
		},
		{
			name: "headers column is optional",
			cols: []Column{{Name: "id", TypeOID: oidInt4}, {Name: "topic", TypeOID: oidText}, {Name: "aggregate_id", TypeOID: oidVarchar}, {Name: "payload", TypeOID: oidText}},
		},
		{
			name: "missing column",
			cols: []Column{{Name: "id", TypeOID: oidInt8}, {Name: "aggregate_id", TypeOID: oidUUID}, {Name: "payload", TypeOID: oidJSONB}},
			errs: []string{`table public.outbox: missing topic column "topic"`},
			n:    1,
		},
		{
			name: "every problem at once",
			cols: []Column{{Name: "id", TypeOID: 1700}, {Name: "topic", TypeOID: 1042}, {Name: "payload", TypeOID: 16}, {Name: "headers", TypeOID: oidText}},
			errs: []string{
				`table public.outbox: id column "id" has type numeric (oid 1700), want bigint, integer, smallint, uuid, text or character varying`,
				`table public.outbox: topic column "topic" has type character (oid 1042), want text or character varying`,
				`table public.outbox: missing key column "aggregate_id"`,
				`table public.outbox: payload column "payload" has type boolean (oid 16), want jsonb, json, bytea, text or character varying`,
				`table public.outbox: headers column "headers" has type text (oid 25), want jsonb or json`,
			},
			n: 5,
		},
		{
			name: "type without a known name",
			cols: []Column{{Name: "id", TypeOID: oidInt8}, {Name: "topic", TypeOID: oidText}, {Name: "aggregate_id", TypeOID: 16500}, {Name: "payload", TypeOID: oidJSONB}},
			errs: []string{`key column "aggregate_id" has type oid 16500, want uuid, text, character varying, bigint, integer or smallint`},
			n:    1,
		},
		{
			name: "custom names",
			cols: []Column{{Name: "seq", TypeOID: oidInt8}, {Name: "dest", TypeOID: oidText}, {Name: "k", TypeOID: oidText}, {Name: "body", TypeOID: oidJSONB}},
			want: Columns{ID: "seq", Topic: "dest", Key: "k", Payload: "body", Headers: "meta"},
		},
		{
			name: "custom names, default table does not match",
			cols: outboxColumns(),
			want: Columns{ID: "seq", Topic: "dest", Key: "k", Payload: "body", Headers: "meta"},
			errs: []string{`missing id column "seq"`, `missing topic column "dest"`, `missing key column "k"`, `missing payload column "body"`},
			n:    4,
		},
		{
			name: "one column configured for two roles",
			cols: []Column{{Name: "id", TypeOID: oidInt8}, {Name: "topic", TypeOID: oidText}, {Name: "payload", TypeOID: oidText}},
			want: Columns{Key: "payload"},
			errs: []string{`table public.outbox: column "payload" is configured as both the key and the payload column`},
			n:    1,
		},
		{
			name: "a topic template replaces the topic column",
			cols: eventsColumns(),
			want: eventsMapping(),
		},
		{
			name: "every problem of a mapping at once",
			cols: []Column{{Name: "seq", TypeOID: oidInt8}, {Name: "aggregateid", TypeOID: oidText}, {Name: "payload", TypeOID: oidJSONB}, {Name: "kind", TypeOID: oidJSONB}, {Name: "at", TypeOID: 1082}},
			want: Columns{ID: "seq", Key: "aggregateid", TopicTemplate: "e.{kind}.{region}", HeaderColumns: []string{"tenant"}, Timestamp: "at"},
			errs: []string{
				`table public.outbox: timestamp column "at" has type date (oid 1082), want timestamp with time zone or timestamp without time zone`,
				`table public.outbox: topic template column "kind" has type jsonb (oid 3802), want text, character varying, uuid, bigint, integer or smallint`,
				`table public.outbox: missing column "region" of the topic template`,
				`table public.outbox: missing header column "tenant"`,
			},
			n: 4,
		},
		{
			name: "a named timestamp column must exist",
			cols: outboxColumns(),
			want: Columns{Timestamp: "occurred_at"},
			errs: []string{`table public.outbox: missing timestamp column "occurred_at"`},
			n:    1,
		},
		{
			name: "an invalid mapping is reported for the table",
			cols: outboxColumns(),
			want: Columns{TopicTemplate: "x.{"},
			errs: []string{`table public.outbox: topic template "x.{": '{' without '}'`},
			n:    1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateTable("public.outbox", tt.cols, tt.want)
			if len(tt.errs) == 0 {
				if err != nil {
					t.Fatalf("ValidateTable: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateTable = nil, want errors %q", tt.errs)
			}
			for _, e := range tt.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q\ndoes not contain %q", err, e)
				}
			}
			if n := len(strings.Split(err.Error(), "\n")); n != tt.n {
				t.Errorf("%d problems reported, want %d:\n%v", n, tt.n, err)
			}
		})
	}
}
