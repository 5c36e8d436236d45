package layout

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// eventsOwn is the events table's own mapping (eventsMapping) in a
// pipeline whose mapping is the default outbox table's.
func eventsOwn() TableColumns {
	return TableColumns{ID: "seq", Key: "aggregateid", TopicTemplate: "outbox.event.{aggregatetype}",
		HeaderColumns: []string{"type"}, Timestamp: "occurred_at"}
}

// One stream, two tables of two shapes: each row becomes a record by its
// own table's mapping, in the order of the stream.
func TestTablesOfTwoShapesInOneStream(t *testing.T) {
	cols := Columns{Tables: map[TableName]TableColumns{{"public", "events"}: eventsOwn()}}
	if err := cols.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	occurred := time.Date(2026, 11, 30, 22, 15, 1, 0, time.UTC)
	d := NewDecoder(cols)
	got := decodeAll(t, d, outboxRelation(), encRelation(eventsRelID, "public", "events", eventsColumns()...), testBegin(),
		outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), null),
		eventsInsert(text("7"), text("order"), text("o-1"), text("OrderCreated"), text(`{"a": 1}`), text("acme"), text("2026-11-30 22:15:01+00")),
		testCommit())
	want := []outbox.Event{
		{Table: "public.outbox", Topic: "orders", Key: []byte(testKey), Value: []byte(testPayload),
			Headers: []outbox.Header{hdr("id", "42")}, CommitTime: testCommitTime, CommitLSN: 0x1000},
		{Table: "public.events", Topic: "outbox.event.order", Key: []byte("o-1"), Value: []byte(`{"a": 1}`),
			Headers: []outbox.Header{hdr("id", "7"), hdr("type", "OrderCreated")}, CommitTime: testCommitTime, Timestamp: occurred, CommitLSN: 0x1000},
	}
	var events []outbox.Event
	for _, m := range got {
		if m.Kind == KindEvent {
			events = append(events, m.Event)
		}
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), got)
	}
	for i := range want {
		events[i].Index = 0 // the place in the transaction is not what this test is about
		if diff := diffEvent(events[i], want[i]); diff != "" {
			t.Errorf("event %d: %s", i, diff)
		}
	}
}

// A table without its own mapping takes the pipeline's: the events table,
// not listed, is unusable by the default mapping, and its rows say so.
func TestATableWithoutItsOwnMappingTakesThePipelines(t *testing.T) {
	cols := Columns{Tables: map[TableName]TableColumns{{"other", "events"}: eventsOwn()}}
	d := NewDecoder(cols)
	decodeAll(t, d, encRelation(eventsRelID, "public", "events", eventsColumns()...), testBegin())
	_, err := d.Decode(eventsInsert(text("7"), text("order"), text("o-1"), text("T"), text(`{}`), null, null))
	var re *RowError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), `missing id column "id"`) {
		t.Fatalf("a row of public.events = %v, want a *RowError naming the default id column", err)
	}
}

func TestColumnsFor(t *testing.T) {
	yes, no := true, false
	pipeline := Columns{ID: "event_id", TopicTemplate: "t.{kind}", HeaderColumns: []string{"kind"}, NoKey: true,
		Source: "s", ReservedTopics: []string{"p"}}
	tests := []struct {
		name string
		own  TableColumns
		want Columns // with defaults
	}{
		{name: "no own mapping", want: pipeline.WithDefaults()},
		{name: "a topic column replaces the template", own: TableColumns{Topic: "dest"},
			want: Columns{ID: "event_id", Topic: "dest", HeaderColumns: []string{"kind"}, NoKey: true, Source: "s", ReservedTopics: []string{"p"}}.WithDefaults()},
		{name: "no-key false takes the default key", own: TableColumns{NoKey: &no},
			want: Columns{ID: "event_id", TopicTemplate: "t.{kind}", HeaderColumns: []string{"kind"}, Source: "s", ReservedTopics: []string{"p"}}.WithDefaults()},
		{name: "no header columns", own: TableColumns{HeaderColumns: []string{}, ID: "seq", NoKey: &yes},
			want: Columns{ID: "seq", TopicTemplate: "t.{kind}", HeaderColumns: []string{}, NoKey: true, Source: "s", ReservedTopics: []string{"p"}}.WithDefaults()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := pipeline
			if tt.name != "no own mapping" {
				c.Tables = map[TableName]TableColumns{{"app", "events"}: tt.own}
			}
			got := c.For("app", "events").WithDefaults()
			if g, w := describeColumns(got), describeColumns(tt.want); g != w {
				t.Errorf("For = %s\nwant %s", g, w)
			}
			if other := c.For("app", "outbox").WithDefaults(); describeColumns(other) != describeColumns(pipeline.WithDefaults()) {
				t.Errorf("another table's mapping = %s, want the pipeline's", describeColumns(other))
			}
		})
	}
}

// describeColumns writes the roles of a mapping, to compare two.
func describeColumns(c Columns) string {
	return strings.Join([]string{c.ID, c.Topic, c.TopicTemplate, c.Key, c.Payload, c.Headers, c.Timestamp,
		strings.Join(c.HeaderColumns, "+"), map[bool]string{true: "nokey", false: "key"}[c.NoKey], c.Source, strings.Join(c.ReservedTopics, "+"),
		map[bool]string{true: "tables", false: "-"}[c.Tables != nil]}, "|")
}

func TestUnpublished(t *testing.T) {
	c := Columns{Tables: map[TableName]TableColumns{{"b", "outbox"}: {ID: "x"}, {"a", "outbox"}: {ID: "x"}, {"c", "outbox"}: {ID: "x"}}}
	got := c.Unpublished([]TableName{{"c", "outbox"}, {"public", "outbox"}})
	if len(got) != 2 || got[0] != (TableName{"a", "outbox"}) || got[1] != (TableName{"b", "outbox"}) {
		t.Errorf("Unpublished = %v, want [a.outbox b.outbox]", got)
	}
	if got := (Columns{}).Unpublished([]TableName{{"a", "b"}}); got != nil {
		t.Errorf("without tables' own mappings: %v, want none", got)
	}
}
