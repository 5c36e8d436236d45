package config

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/layout"
)

// --table-columns gives tables their own mapping (issue 52: one slot over
// outbox tables of more than one shape): the items reach the mapping run
// hands the decoder, and every slip in them is refused under the flag's
// name, all at once.
func TestTableColumnsFlag(t *testing.T) {
	t.Parallel()
	base := []string{"--database-url", "postgres://db/app", "--brokers", "k:9092"}
	events := layout.TableName{Schema: "billing", Name: "Events"}
	cases := []struct {
		name    string
		value   string
		env     string
		check   func(t *testing.T, m layout.Columns)
		wantErr []string // in Validate's error; none: valid
	}{
		{name: "a table of another shape", value: `billing."Events":id-column=seq, billing."Events":topic-template=billing.{type},billing."Events":header-columns=type,billing."Events":header-columns=tenant,billing."Events":no-key=true`,
			check: func(t *testing.T, m layout.Columns) {
				o, ok := m.Tables[events]
				if !ok || o.ID != "seq" || o.TopicTemplate != "billing.{type}" || strings.Join(o.HeaderColumns, ",") != "type,tenant" || o.NoKey == nil || !*o.NoKey {
					t.Errorf("tables %+v, want billing.Events's own id, template, two header columns and no key", m.Tables)
				}
				if got := m.For("billing", "Events").WithDefaults(); got.ID != "seq" || got.Topic != "" {
					t.Errorf("its mapping %+v", got)
				}
				if got := m.For("public", "outbox").WithDefaults(); got.ID != "id" || got.Topic != "topic" {
					t.Errorf("another table's mapping %+v, want the defaults", got)
				}
			}},
		{name: "from the environment", env: "app.outbox:payload-column=body",
			check: func(t *testing.T, m layout.Columns) {
				if m.Tables[layout.TableName{Schema: "app", Name: "outbox"}].Payload != "body" {
					t.Errorf("tables %+v, want app.outbox's payload column body", m.Tables)
				}
			}},
		{name: "no header columns", value: "app.outbox:header-columns=",
			check: func(t *testing.T, m layout.Columns) {
				if h := m.Tables[layout.TableName{Schema: "app", Name: "outbox"}].HeaderColumns; h == nil || len(h) != 0 {
					t.Errorf("header columns %#v, want none (empty, not nil)", h)
				}
			}},
		{name: "every slip at once", value: `outbox:id-column=seq,app.outbox id-column=seq,app.outbox:colour=red,app.outbox:no-key=maybe,app.outbox:id-column=,a.b:id-column=x,a.b:id-column=y,"x.y:id-column=z`,
			wantErr: []string{
				`--table-columns (OUTBOXD_TABLE_COLUMNS): "outbox:id-column=seq": write the table schema-qualified (public.outbox)`,
				`"app.outbox id-column=seq": want TABLE:SETTING=VALUE`,
				`"app.outbox:colour=red": a table sets id-column, topic-column`,
				`"app.outbox:no-key=maybe": no-key is true or false`,
				`"app.outbox:id-column=": id-column must not be empty`,
				`"a.b:id-column=y": id-column of a.b given twice`,
				`"\"x.y:id-column=z": want TABLE:SETTING=VALUE`,
			}},
		{name: "the table's mapping checked", value: "app.outbox:topic-template=t.{x,app.outbox:header-columns=id",
			wantErr: []string{`--table-columns (OUTBOXD_TABLE_COLUMNS): the columns of table app.outbox: topic template "t.{x": '{' without '}'`, `header columns: "id" is reserved`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			fs := runLike(&c)
			args := append([]string{}, base...)
			if tc.value != "" {
				args = append(args, "--table-columns", tc.value)
			}
			getenv := func(k string) string {
				if k == "OUTBOXD_TABLE_COLUMNS" {
					return tc.env
				}
				return ""
			}
			if err := Parse(fs, args, getenv); err != nil {
				t.Fatal(err)
			}
			err := c.Validate(fs)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want none", err)
				}
				tc.check(t, c.Mapping())
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v\nwant %q in it", err, w)
				}
			}
		})
	}
}
