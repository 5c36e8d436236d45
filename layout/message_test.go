package layout

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/outbox"
)

const testPrefix = "outboxd.event"

func messageDecoder(t *testing.T, m Columns) *Decoder {
	t.Helper()
	if m.MessagePrefix == "" {
		m.MessagePrefix = testPrefix
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(m)
	decodeAll(t, d, outboxRelation(), testBegin())
	return d
}

func TestDecodeMessage(t *testing.T) {
	msgEvent := func(key, value []byte, headers ...outbox.Header) outbox.Event {
		return outbox.Event{Table: "message:" + testPrefix, Topic: "orders.created", Key: key, Value: value,
			Headers: append([]outbox.Header{hdr("id", "0/2A00")}, headers...), CommitTime: testCommitTime, CommitLSN: 0x1000}
	}
	tests := []struct {
		name    string
		mapping Columns
		content string
		want    outbox.Event
	}{
		{
			name:    "every member",
			content: `{"topic": "orders.created", "key": "o-1", "headers": {"type": "OrderCreated", "attempt": 3}, "payload": {"order": 42, "items": [1, 2]}}`,
			want:    msgEvent([]byte("o-1"), []byte(`{"order": 42, "items": [1, 2]}`), hdr("type", "OrderCreated"), hdr("attempt", "3")),
		},
		{
			name:    "only a topic: no key, no headers, a tombstone",
			content: `{"topic": "orders.created"}`,
			want:    msgEvent(nil, nil),
		},
		{
			name:    "nulls are absent members; an empty key is a key",
			content: `{"topic": "orders.created", "key": "", "headers": null, "payload": null}`,
			want:    msgEvent([]byte{}, nil),
		},
		{
			name:    "a payload that is a JSON string or number is its JSON text",
			content: `{"payload": "hello", "topic": "orders.created"}`,
			want:    msgEvent(nil, []byte(`"hello"`)),
		},
		{
			name:    "CloudEvents: the type template over topic and key",
			mapping: Columns{Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Source: "/orders", Type: "com.example.{topic}.{key}"}},
			content: `{"topic": "orders.created", "key": "o-1", "headers": {"ce_subject": "s"}, "payload": {}}`,
			want: msgEvent([]byte("o-1"), []byte(`{}`), hdr("ce_specversion", "1.0"), hdr("ce_id", "0/2A00"), hdr("ce_source", "/orders"),
				hdr("ce_type", "com.example.orders.created.o-1"), hdr("ce_time", "2026-01-02T03:04:05.123456Z"),
				hdr("content-type", "application/json"), hdr("ce_subject", "s")),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := messageDecoder(t, tt.mapping)
			got, err := d.Decode(encLogicalMessage(true, 0x2A00, testPrefix, tt.content))
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != KindEvent {
				t.Fatalf("Kind %v, want event", got.Kind)
			}
			if diff := diffEvent(got.Event, tt.want); diff != "" {
				t.Error(diff)
			}
			if tt.mapping.Shape == ShapeCloudEvents {
				return // {key} is no column of the outbox table: its inserts are row errors
			}
			// The message is the transaction's first event; an insert after
			// it comes second.
			next, err := d.Decode(outboxInsert(text("5"), text(testKey), text("t"), text(`{}`), null))
			if err != nil || next.Event.Index != 1 {
				t.Errorf("insert after the message: index %d (%v), want 1", next.Event.Index, err)
			}
		})
	}
}

func TestDecodeMessageIgnored(t *testing.T) {
	tests := []struct {
		name   string
		prefix string // the decoder's; "" is off
		msg    []byte
	}{
		{"messages off", "", encLogicalMessage(true, 0x2A00, testPrefix, `{"topic": "t"}`)},
		{"another prefix", testPrefix, encLogicalMessage(true, 0x2A00, "app.audit", `not json`)},
		{"a prefix that starts like ours", testPrefix, encLogicalMessage(true, 0x2A00, testPrefix+".v2", `{"topic": "t"}`)},
		{"the heartbeat", testPrefix, encLogicalMessage(false, 0x2A00, ReservedMessagePrefix, ``)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(Columns{MessagePrefix: tt.prefix})
			decodeAll(t, d, testBegin())
			got, err := d.Decode(tt.msg)
			if err != nil || got.Kind != KindIgnored {
				t.Fatalf("Decode = %v, %v; want ignored", got.Kind, err)
			}
		})
	}
}

func TestDecodeMessageRowErrors(t *testing.T) {
	tests := []struct {
		name          string
		mapping       Columns
		transactional bool
		content       string
		err           string
		topic, value  string // what the RowError carries for a dead letter
		standalone    bool
	}{
		{name: "not JSON", transactional: true, content: `{"topic": `, err: "envelope is not valid JSON", value: `{"topic": `},
		{name: "not an object", transactional: true, content: `["orders"]`, err: "envelope is a JSON array", value: `["orders"]`},
		{name: "no topic", transactional: true, content: `{"payload": {"a": 1}}`, err: "topic missing or empty", value: `{"a": 1}`},
		{name: "empty topic", transactional: true, content: `{"topic": "", "payload": 1}`, err: "topic missing or empty", value: "1"},
		{name: "a topic that is not a string", transactional: true, content: `{"topic": 7}`, err: "envelope: topic is a JSON number, want a string", value: `{"topic": 7}`},
		{name: "a key that is not a string", transactional: true, content: `{"topic": "t", "key": 7}`, err: "envelope: key is a JSON number, want a string", value: `{"topic": "t", "key": 7}`},
		{name: "an unknown member", transactional: true, content: `{"topic": "t", "paylaod": 1}`, err: `unknown member "paylaod"`, value: `{"topic": "t", "paylaod": 1}`},
		{name: "a member named in another case", transactional: true, content: `{"topic": "t", "Topic": "u"}`, err: `unknown member "Topic"`, value: `{"topic": "t", "Topic": "u"}`},
		{name: "a member twice", transactional: true, content: `{"topic": "t", "topic": "u"}`, err: `member "topic" twice`, value: `{"topic": "t", "topic": "u"}`},
		{name: "headers that are not an object", transactional: true, content: `{"topic": "t", "headers": [1], "payload": 2}`,
			err: "envelope headers: headers are a JSON array", topic: "t", value: "2"},
		{name: "the id header set", transactional: true, content: `{"topic": "t", "headers": {"id": "x"}}`,
			err: `header "id" is reserved`, topic: "t"},
		// Regression (issue 49, item 5): an envelope could carry the header
		// an exactly-once progress reader trusts.
		{name: "the transactional id header set", transactional: true, content: `{"topic": "t", "headers": {"outboxd-transactional-id": "x"}}`,
			err: `header "outboxd-transactional-id" is reserved`, topic: "t"},
		{name: "a CloudEvents attribute set", mapping: Columns{Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Source: "/s", Type: "x"}}, transactional: true,
			content: `{"topic": "t", "headers": {"ce_type": "x"}}`, err: `header "ce_type" is set by CloudEvents`, topic: "t"},
		{name: "a type template placeholder a message lacks", mapping: Columns{Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Source: "/s", Type: "x.{type}"}}, transactional: true,
			content: `{"topic": "t"}`, err: "{type} has no value in a message envelope", topic: "t"},
		// Regression (issue 37): a table-less message could name the
		// progress topic and forge exactly-once progress.
		{name: "the progress topic", mapping: Columns{ReservedTopics: []string{"outboxd.progress"}}, transactional: true,
			content: `{"topic": "outboxd.progress", "key": "s@1/1", "payload": {"commit_lsn": "FF/0"}}`, err: `envelope: topic "outboxd.progress" is reserved`,
			value: `{"commit_lsn": "FF/0"}`},
		{name: "a Kafka internal topic", transactional: true, content: `{"topic": "__transaction_state", "payload": 1}`,
			err: `envelope: topic "__transaction_state" is a Kafka internal topic`, value: "1"},
		{name: "non-transactional", content: `{"topic": "t", "payload": 3}`, err: "non-transactional message", topic: "t", value: "3", standalone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := messageDecoder(t, tt.mapping)
			if tt.standalone {
				decodeAll(t, d, testCommit()) // outside a transaction, as pgoutput sends it
			}
			_, err := d.Decode(encLogicalMessage(tt.transactional, 0x2A00, testPrefix, tt.content))
			var re *RowError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want a *RowError saying %s", err, tt.err)
			}
			if !strings.HasPrefix(err.Error(), "decoding logical decoding message outboxd.event at 0/2A00: ") {
				t.Errorf("error %q does not say which message", err)
			}
			if re.ID != "0/2A00" || re.MessageLSN != 0x2A00 || re.Table != "message:"+testPrefix || re.Standalone != tt.standalone ||
				re.Topic != tt.topic || string(re.Value) != tt.value {
				t.Errorf("RowError id %q lsn %s table %q standalone %v topic %q value %q; want 0/2A00, message:%s, %v, %q, %q",
					re.ID, re.MessageLSN, re.Table, re.Standalone, re.Topic, re.Value, testPrefix, tt.standalone, tt.topic, tt.value)
			}
			if tt.standalone && re.CommitLSN != 0x2A00 {
				t.Errorf("standalone CommitLSN %s, want the message's", re.CommitLSN)
			}
			if !tt.standalone && (re.CommitLSN != 0x1000 || re.Index != 0) {
				t.Errorf("CommitLSN %s index %d, want the transaction's 0/1000 and 0", re.CommitLSN, re.Index)
			}
		})
	}
}

// A transactional message can only come inside a transaction: outside
// one the stream is broken, not the message.
func TestDecodeTransactionalMessageOutsideATransaction(t *testing.T) {
	d := NewDecoder(Columns{MessagePrefix: testPrefix})
	_, err := d.Decode(encLogicalMessage(true, 0x2A00, testPrefix, `{"topic": "t"}`))
	var re *RowError
	if err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), "outside a transaction") {
		t.Fatalf("error %v, want a stream error", err)
	}
}

func TestMessagePrefixValidate(t *testing.T) {
	if err := (Columns{MessagePrefix: ReservedMessagePrefix}).Validate(); err == nil || !strings.Contains(err.Error(), "heartbeat") {
		t.Errorf("Validate = %v, want the heartbeat's prefix refused", err)
	}
}
