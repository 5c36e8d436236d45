package layout

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// An outbox of another shape: Debezium-like names, a type and a tenant to
// become headers, and the application's own event time.
const eventsRelID = 16500

func eventsColumns() []Column {
	return []Column{
		{Name: "seq", TypeOID: oidInt8}, {Name: "aggregatetype", TypeOID: oidVarchar}, {Name: "aggregateid", TypeOID: oidVarchar}, {Name: "type", TypeOID: oidVarchar},
		{Name: "payload", TypeOID: oidJSONB}, {Name: "tenant", TypeOID: oidText}, {Name: "occurred_at", TypeOID: oidTimestamptz}, {Name: "local_at", TypeOID: oidTimestamp},
	}
}

func eventsMapping() Columns {
	return Columns{ID: "seq", Key: "aggregateid", TopicTemplate: "outbox.event.{aggregatetype}",
		HeaderColumns: []string{"type", "tenant"}, Timestamp: "occurred_at"}
}

// eventsInsert encodes an insert into the events table; local_at is NULL.
func eventsInsert(seq, aggType, aggID, typ, payload, tenant, occurred tv) []byte {
	return encInsert(eventsRelID, seq, aggType, aggID, typ, payload, tenant, occurred, null)
}

func TestDecodeMappedColumns(t *testing.T) {
	occurred := time.Date(2026, 11, 30, 22, 15, 1, 250000000, time.UTC)
	want := func(mod func(*outbox.Event)) outbox.Event {
		ev := outbox.Event{Table: "public.events", Topic: "outbox.event.order", Key: []byte("o-1"),
			Value:      []byte(`{"a": 1}`),
			Headers:    []outbox.Header{hdr("id", "7"), hdr("type", "OrderCreated"), hdr("tenant", "acme")},
			CommitTime: testCommitTime, Timestamp: occurred, CommitLSN: 0x1000}
		if mod != nil {
			mod(&ev)
		}
		return ev
	}
	seq7 := text("7")
	tests := []struct {
		name    string
		mapping Columns
		insert  []byte
		want    outbox.Event
	}{
		{
			name:    "template, header columns and timestamp column",
			mapping: eventsMapping(),
			insert:  eventsInsert(seq7, text("order"), text("o-1"), text("OrderCreated"), text(`{"a": 1}`), text("acme"), text("2026-11-30 23:15:01.25+01")),
			want:    want(nil),
		},
		{
			name:    "a NULL header column is a header with a null value",
			mapping: eventsMapping(),
			insert:  eventsInsert(seq7, text("order"), text("o-1"), text("OrderCreated"), text(`{"a": 1}`), null, text("2026-11-30 22:15:01.25+00")),
			want:    want(func(ev *outbox.Event) { ev.Headers[2].Value = nil }),
		},
		{
			name:    "an empty header column is an empty header",
			mapping: eventsMapping(),
			insert:  eventsInsert(seq7, text("order"), text("o-1"), text("OrderCreated"), text(`{"a": 1}`), text(""), text("2026-11-30 22:15:01.25+00")),
			want:    want(func(ev *outbox.Event) { ev.Headers[2].Value = []byte{} }),
		},
		{
			name:    "a NULL timestamp falls back to the commit time",
			mapping: eventsMapping(),
			insert:  eventsInsert(seq7, text("order"), text("o-1"), text("OrderCreated"), text(`{"a": 1}`), text("acme"), null),
			want:    want(func(ev *outbox.Event) { ev.Timestamp = time.Time{} }),
		},
		{
			name: "a timestamp without time zone is UTC",
			mapping: Columns{ID: "seq", Key: "aggregateid", TopicTemplate: "outbox.event.{aggregatetype}",
				HeaderColumns: []string{"type", "tenant"}, Timestamp: "local_at"},
			insert: encInsert(eventsRelID, seq7, text("order"), text("o-1"), text("OrderCreated"), text(`{"a": 1}`), text("acme"), null,
				text("2026-11-30 22:15:01.25")),
			want: want(nil),
		},
		{
			name:    "binary values in the template, the headers and the timestamp",
			mapping: Columns{ID: "seq", Key: "aggregateid", TopicTemplate: "t.{seq}.{aggregatetype}", HeaderColumns: []string{"seq", "payload"}, Timestamp: "occurred_at"},
			insert: eventsInsert(bin("\x00\x00\x00\x00\x00\x00\x00\x07"), bin("order"), text("o-1"), text("OrderCreated"), bin("\x01{\"a\": 1}"), null,
				bin(string(binary.BigEndian.AppendUint64(nil, uint64(occurred.Sub(pgEpoch).Microseconds()))))),
			want: want(func(ev *outbox.Event) {
				ev.Topic = "t.7.order"
				ev.Headers = []outbox.Header{hdr("id", "7"), hdr("seq", "7"), hdr("payload", `{"a": 1}`)}
			}),
		},
		{
			name:    "a template without placeholders is one topic",
			mapping: Columns{ID: "seq", Key: "aggregateid", TopicTemplate: "all-events"},
			insert:  eventsInsert(seq7, null, text("o-1"), text("OrderCreated"), text(`{"a": 1}`), text("acme"), null),
			want: want(func(ev *outbox.Event) {
				ev.Topic, ev.Timestamp = "all-events", time.Time{}
				ev.Headers = ev.Headers[:1]
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(tt.mapping)
			got := decodeAll(t, d, encRelation(eventsRelID, "public", "events", eventsColumns()...), testBegin(), tt.insert)
			if got[2].Kind != KindEvent {
				t.Fatalf("kind %v, want event", got[2].Kind)
			}
			if diff := diffEvent(got[2].Event, tt.want); diff != "" {
				t.Error(diff)
			}
			if rt := got[2].Event.RecordTime(); !rt.Equal(tt.want.RecordTime()) {
				t.Errorf("RecordTime %v, want %v", rt, tt.want.RecordTime())
			}
		})
	}
}

func TestDecodeMappedColumnsRowErrors(t *testing.T) {
	seq7, ts := text("7"), text("2026-11-30 22:15:01+00")
	tests := []struct {
		name       string
		insert     []byte
		column     string
		err        string
		wantTopic  string
		wantKeyVal string
	}{
		{
			name:   "NULL in the topic template",
			insert: eventsInsert(seq7, null, text("o-1"), text("T"), text(`{}`), null, ts),
			column: "aggregatetype", err: "null value in the topic template", wantKeyVal: "o-1",
		},
		{
			name:   "empty value in the topic template",
			insert: eventsInsert(seq7, text(""), text("o-1"), text("T"), text(`{}`), null, ts),
			column: "aggregatetype", err: "empty value in the topic template", wantKeyVal: "o-1",
		},
		{
			name:   "infinite timestamp",
			insert: eventsInsert(seq7, text("order"), text("o-1"), text("T"), text(`{}`), null, text("infinity")),
			column: "occurred_at", err: `timestamp "infinity" is not a finite time`, wantTopic: "outbox.event.order", wantKeyVal: "o-1",
		},
		{
			name:   "unreadable timestamp",
			insert: eventsInsert(seq7, text("order"), text("o-1"), text("T"), text(`{}`), null, text("30/11/2026")),
			column: "occurred_at", err: `timestamp "30/11/2026"`, wantTopic: "outbox.event.order", wantKeyVal: "o-1",
		},
		{
			name:   "binary header column of a type without a text form",
			insert: encInsert(eventsRelID, seq7, text("order"), text("o-1"), text("T"), text(`{}`), text("acme"), ts, bin("\x00\x00\x00\x00\x00\x00\x00\x01")),
			column: "local_at", err: "binary value of type timestamp without time zone", wantTopic: "outbox.event.order", wantKeyVal: "o-1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := eventsMapping()
			m.HeaderColumns = append(m.HeaderColumns, "local_at")
			d := NewDecoder(m)
			decodeAll(t, d, encRelation(eventsRelID, "public", "events", eventsColumns()...), testBegin())
			_, err := d.Decode(tt.insert)
			var re *RowError
			if !errors.As(err, &re) {
				t.Fatalf("error %v (%T), want a *RowError", err, err)
			}
			if re.Column != tt.column || !strings.Contains(re.Err.Error(), tt.err) {
				t.Errorf("column %q, error %q; want column %q, error containing %q", re.Column, re.Err, tt.column, tt.err)
			}
			if re.ID != "7" || re.Topic != tt.wantTopic || string(re.Key) != tt.wantKeyVal {
				t.Errorf("RowError carries id %q, topic %q, key %q; want 7, %q, %q", re.ID, re.Topic, re.Key, tt.wantTopic, tt.wantKeyVal)
			}
		})
	}
}

// A Relation message sent after an ALTER TABLE is checked against the
// mapping again: dropping a column the template reads makes every later
// insert a *RowError naming it, not a record with a wrong topic.
func TestDecodeMappedColumnsRecheckedOnRelation(t *testing.T) {
	d := NewDecoder(eventsMapping())
	ts := text("2026-11-30 22:15:01+00")
	got := decodeAll(t, d, encRelation(eventsRelID, "public", "events", eventsColumns()...), testBegin(),
		eventsInsert(text("7"), text("order"), text("o-1"), text("T"), text(`{}`), null, ts), testCommit())
	if got[2].Kind != KindEvent || got[2].Event.Topic != "outbox.event.order" {
		t.Fatalf("before the change: %+v", got[2])
	}
	var altered []Column
	for _, c := range eventsColumns() {
		if c.Name != "aggregatetype" {
			altered = append(altered, c)
		}
	}
	decodeAll(t, d, encRelation(eventsRelID, "public", "events", altered...), testBegin())
	_, err := d.Decode(encInsert(eventsRelID, text("8"), text("o-1"), text("T"), text(`{}`), null, ts, null))
	var re *RowError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), `missing column "aggregatetype" of the topic template`) || re.ID != "8" {
		t.Fatalf("after dropping the template's column: %v, want a *RowError for outbox id 8 naming the column", err)
	}
	if re.Topic != "" {
		t.Errorf("RowError.Topic %q from an incomplete template, want none", re.Topic)
	}
}

func TestColumnsValidate(t *testing.T) {
	yes := true
	tests := []struct {
		name string
		c    Columns
		errs []string
	}{
		{name: "default"},
		{name: "template", c: Columns{TopicTemplate: "orders.{aggregatetype}.{type}", HeaderColumns: []string{"type"}}},
		{name: "fixed topic", c: Columns{TopicTemplate: "orders"}},
		{name: "unclosed placeholder", c: Columns{TopicTemplate: "orders.{type"}, errs: []string{`topic template "orders.{type": '{' without '}'`}},
		{name: "nested placeholder", c: Columns{TopicTemplate: "orders.{a{b}}"}, errs: []string{`'{' without '}'`}},
		{name: "stray close", c: Columns{TopicTemplate: "orders}"}, errs: []string{`'}' without '{'`}},
		{name: "empty placeholder", c: Columns{TopicTemplate: "orders.{ }"}, errs: []string{"empty placeholder"}},
		{
			name: "every problem at once",
			c:    Columns{TopicTemplate: "{", HeaderColumns: []string{"id", "type", "type", "", "outboxd.source"}},
			errs: []string{`'{' without '}'`, `"id" is reserved`, `"type" listed twice`, "empty column name", `"outboxd.source" is reserved`},
		},
		// Tables' own mappings (--table-columns).
		{name: "a table's own mapping", c: Columns{Tables: map[TableName]TableColumns{{"app", "events"}: eventsOwn()}}},
		{name: "the table's template does not parse", c: Columns{Tables: map[TableName]TableColumns{{"app", "events"}: {TopicTemplate: "t.{x"}}},
			errs: []string{`the columns of table app.events: topic template "t.{x": '{' without '}'`}},
		{name: "a topic column and a template", c: Columns{Tables: map[TableName]TableColumns{{"app", "events"}: {Topic: "dest", TopicTemplate: "t"}}},
			errs: []string{"a topic column and a topic template"}},
		{name: "a key and no key", c: Columns{Tables: map[TableName]TableColumns{{"app", "events"}: {Key: "k", NoKey: &yes}}},
			errs: []string{"a key column and no key"}},
		{name: "nothing set", c: Columns{Tables: map[TableName]TableColumns{{"app", "events"}: {}}},
			errs: []string{"no setting given"}},
		{name: "not schema-qualified", c: Columns{Tables: map[TableName]TableColumns{{"", "events"}: {ID: "seq"}}},
			errs: []string{"want a schema-qualified table"}},
		{name: "a reserved header, two tables, every problem at once",
			c:    Columns{Tables: map[TableName]TableColumns{{"app", "events"}: {HeaderColumns: []string{"id"}}, {"b", "x"}: {TopicTemplate: "{"}}},
			errs: []string{`app.events: header columns: "id" is reserved`, `b.x: topic template "{"`}},
		{name: "Debezium routes itself", c: Columns{Shape: ShapeDebezium, Tables: map[TableName]TableColumns{{"app", "events"}: {Topic: "dest", ID: "seq"}}},
			errs: []string{"the Debezium layout routes and places headers itself"}},
		{name: "the pipeline's problem once, not again for each table",
			c:    Columns{HeaderColumns: []string{"id"}, Tables: map[TableName]TableColumns{{"app", "events"}: {ID: "seq"}, {"b", "x"}: {ID: "seq"}}},
			errs: []string{`header columns: "id" is reserved`}},
		{name: "Debezium takes a table's own id", c: Columns{Shape: ShapeDebezium, Tables: map[TableName]TableColumns{{"app", "events"}: {ID: "seq"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if len(tt.errs) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want %q", tt.errs)
			}
			for _, e := range tt.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q\ndoes not contain %q", err, e)
				}
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tt.errs) {
				t.Errorf("%d problems, want %d: %v", n, len(tt.errs), err)
			}
		})
	}
}
