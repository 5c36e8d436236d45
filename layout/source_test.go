package layout

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// testSource is a Columns.Source as cdc sets it: system identifier/database.
const testSource = "7301234567890123456/app"

// headerKeys lists an event's header names, in order.
func headerKeys(ev outbox.Event) string {
	var ks []string
	for _, h := range ev.Headers {
		ks = append(ks, h.Key)
	}
	return strings.Join(ks, " ")
}

// Regression test for issue 37, item 3 (the consumer merged different
// sources' ids: two outbox tables or two databases with the same ids
// deduplicated each other away): every record names its source in an
// outboxd.source header, right after the id header, so that source + id is
// unique. Rows of each layout, a table-less message and a backfilled
// (Snapshot) row; none without Columns.Source.
func TestSourceHeader(t *testing.T) {
	withSource := func(c Columns) Columns { c.Source = testSource; return c }
	row := outboxInsert(text("42"), text(testKey), text("orders"), text(`{"n": 1}`), text(`{"type": "OrderCreated"}`))
	ce := Columns{Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Source: "/orders", Type: "com.example.order"}}
	dzc := DebeziumColumns()
	dzc.Debezium.AdditionalPlacement = []Placement{{Column: "type", Alias: "eventType"}}
	tests := []struct {
		name     string
		cols     Columns
		msgs     [][]byte // decoded in order; the last one is the event
		snapshot bool     // decode the last row through a Snapshot of table app.outbox instead
		source   string   // the header's value; "" for none
		keys     string   // the header names, in order
	}{
		{name: "row", cols: withSource(Columns{}), msgs: [][]byte{outboxRelation(), testBegin(), row},
			source: testSource + "/public.outbox", keys: "id outboxd.source type"},
		{name: "row of another table of the same database", cols: withSource(Columns{}),
			msgs:   [][]byte{encRelation(outboxRelID+1, "billing", "outbox", outboxColumns()...), testBegin(), encInsert(outboxRelID+1, text("42"), null, text("t"), null, null, null)},
			source: testSource + "/billing.outbox", keys: "id outboxd.source"},
		{name: "row, CloudEvents: before the attributes", cols: withSource(ce), msgs: [][]byte{outboxRelation(), testBegin(), row},
			source: testSource + "/public.outbox", keys: "id outboxd.source ce_specversion ce_id ce_source ce_type ce_time content-type type"},
		{name: "row, Debezium layout: before the placed columns", cols: withSource(dzc),
			msgs:   [][]byte{encRelation(dzRelID, "public", "outbox_debezium", dzColumns()...), testBegin(), dzRow(text("Order"), text("1"), text(`{}`), nil)},
			source: testSource + "/public.outbox_debezium", keys: "id outboxd.source eventType"},
		{name: "table-less message", cols: withSource(Columns{MessagePrefix: testPrefix}),
			msgs:   [][]byte{testBegin(), encLogicalMessage(true, 0x2A00, testPrefix, `{"topic": "orders", "headers": {"type": "OrderCreated"}}`)},
			source: testSource + "/message:" + testPrefix, keys: "id outboxd.source type"},
		{name: "backfilled row: as a streamed row of its table", cols: withSource(Columns{}), snapshot: true,
			source: testSource + "/app.outbox", keys: "id outboxd.source"},
		{name: "no Source: no header", cols: Columns{}, msgs: [][]byte{outboxRelation(), testBegin(), row}, keys: "id type"},
		{name: "no Source, message: no header", cols: Columns{MessagePrefix: testPrefix},
			msgs: [][]byte{testBegin(), encLogicalMessage(true, 0x2A00, testPrefix, `{"topic": "orders"}`)}, keys: "id"},
		{name: "no Source, backfilled row: no header", cols: Columns{}, snapshot: true, keys: "id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cols.Validate(); err != nil {
				t.Fatal(err)
			}
			var m Message
			if tt.snapshot {
				s, _, err := NewSnapshot(tt.cols, 0x5001, time.Unix(0, 0))
				if err != nil {
					t.Fatal(err)
				}
				rel, err := s.Table("app", "outbox", outboxColumns())
				if err != nil {
					t.Fatal(err)
				}
				if m, err = s.Row(rel, rowValues([]tv{text("7"), null, text("orders"), text("{}"), null, null})); err != nil {
					t.Fatal(err)
				}
			} else {
				ms := decodeAll(t, NewDecoder(tt.cols), tt.msgs...)
				m = ms[len(ms)-1]
			}
			if m.Kind != KindEvent {
				t.Fatalf("decoded %v, want an event", m.Kind)
			}
			if got := headerKeys(m.Event); got != tt.keys {
				t.Errorf("headers %q, want %q", got, tt.keys)
			}
			if tt.source == "" {
				return
			}
			if hs := m.Event.Headers; len(hs) < 2 || hs[1].Key != outbox.SourceHeader || string(hs[1].Value) != tt.source {
				t.Errorf("headers %q, want %s=%q second", hs, outbox.SourceHeader, tt.source)
			}
			if want := tt.source[len(testSource)+1:]; m.Event.Table != want {
				t.Errorf("Event.Table %q, want the source's table part %q", m.Event.Table, want)
			}
		})
	}
}

// The source header is carved from the event's one allocation: it costs
// no allocation per event (see BenchmarkDecodeInsertWithSource).
func TestSourceHeaderAllocatesNothing(t *testing.T) {
	row := outboxInsert(text("42"), text(testKey), text("orders"), text(`{"n": 1}`), text(`{"type": "OrderCreated"}`))
	allocs := func(cols Columns) float64 {
		d := NewDecoder(cols)
		decodeAll(t, d, outboxRelation(), testBegin())
		return testing.AllocsPerRun(100, func() {
			if m, err := d.Decode(row); err != nil || m.Kind != KindEvent {
				t.Fatal(m.Kind, err)
			}
		})
	}
	without, with := allocs(Columns{}), allocs(Columns{Source: testSource})
	if with != without {
		t.Errorf("allocations per event: %v with a source, %v without", with, without)
	}
}

// Regression (issue 37, review): the source joined schema and table with a
// dot unquoted, so schema a.b with table c and schema a with table b.c had
// one source, and their ids deduped each other away.
func TestSourceNamesNeverRunTogether(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"public", "public"},
		{"outbox_2", "outbox_2"},
		{"a.b", `"a.b"`},
		{"Orders", `"Orders"`},
		{`x"y`, `"x""y"`},
		{"db/1", `"db/1"`},
		{"1abc", `"1abc"`},
		{"", `""`},
	} {
		if got := SourceName(tc.in); got != tc.want {
			t.Errorf("SourceName(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	source := func(schema, table string) string {
		d := NewDecoder(Columns{Source: "7001/app"})
		decodeAll(t, d, encRelation(9, schema, table, outboxColumns()...), testBegin())
		m, err := d.Decode(encInsert(9, text("1"), null, text("t"), text("{}"), null, null))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range m.Event.Headers {
			if h.Key == outbox.SourceHeader {
				return string(h.Value)
			}
		}
		t.Fatal("no source header")
		return ""
	}
	ab, a := source("a.b", "c"), source("a", "b.c")
	if ab == a {
		t.Errorf("schema a.b with table c and schema a with table b.c share the source %s", ab)
	}
	if ab != `7001/app/"a.b".c` {
		t.Errorf("source %s, want 7001/app/\"a.b\".c", ab)
	}
}

// Issue 50: splitting the layouts into shapes must keep the hot path at
// two allocations per record, the record's bytes and its headers (an
// Event escaping to the heap through a shape's hook cost a third), and
// CloudEvents at the three it had (its type template's closure).
func TestARecordIsTwoAllocations(t *testing.T) {
	row := outboxInsert(text("42"), text(testKey), text("orders"), text(`{"n": 1}`), text(`{"type": "OrderCreated"}`))
	for _, tt := range []struct {
		cols Columns
		want float64
	}{
		{Columns{}, 2},
		{Columns{Source: testSource}, 2},
		{Columns{Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Source: "/orders", Type: "com.example.order"}}, 3},
	} {
		d := NewDecoder(tt.cols)
		decodeAll(t, d, outboxRelation(), testBegin())
		allocs := testing.AllocsPerRun(100, func() {
			if m, err := d.Decode(row); err != nil || m.Kind != KindEvent {
				t.Fatal(m.Kind, err)
			}
		})
		if allocs != tt.want {
			t.Errorf("shape %q, source %q: %v allocations per record, want %v", tt.cols.Shape, tt.cols.Source, allocs, tt.want)
		}
	}
}
