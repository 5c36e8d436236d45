package layout

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/outboxd/outboxd/outbox"
	"strings"
	"testing"
	"time"
)

// hdr builds an expected header.
func hdr(k, v string) outbox.Header { return outbox.Header{Key: k, Value: []byte(v)} }

// diffEvent describes how got differs from want ("" when equal). A nil and
// an empty byte slice differ: nil means NULL.
func diffEvent(got, want outbox.Event) string {
	var d []string
	if got.Table != want.Table {
		d = append(d, fmt.Sprintf("Table %q, want %q", got.Table, want.Table))
	}
	if got.ID() != want.ID() {
		d = append(d, fmt.Sprintf("ID %q, want %q", got.ID(), want.ID()))
	}
	if got.Topic != want.Topic {
		d = append(d, fmt.Sprintf("Topic %q, want %q", got.Topic, want.Topic))
	}
	if !sameBytes(got.Key, want.Key) {
		d = append(d, fmt.Sprintf("Key %s, want %s", showBytes(got.Key), showBytes(want.Key)))
	}
	if !sameBytes(got.Value, want.Value) {
		d = append(d, fmt.Sprintf("Value %s, want %s", showBytes(got.Value), showBytes(want.Value)))
	}
	if !got.CommitTime.Equal(want.CommitTime) {
		d = append(d, fmt.Sprintf("CommitTime %v, want %v", got.CommitTime, want.CommitTime))
	}
	if !got.Timestamp.Equal(want.Timestamp) {
		d = append(d, fmt.Sprintf("Timestamp %v, want %v", got.Timestamp, want.Timestamp))
	}
	if got.CommitLSN != want.CommitLSN || got.Index != want.Index {
		d = append(d, fmt.Sprintf("position (%v, %d), want (%v, %d)", got.CommitLSN, got.Index, want.CommitLSN, want.Index))
	}
	if len(got.Headers) != len(want.Headers) {
		d = append(d, fmt.Sprintf("Headers %s, want %s", showHeaders(got.Headers), showHeaders(want.Headers)))
	} else {
		for i := range got.Headers {
			if got.Headers[i].Key != want.Headers[i].Key || !sameBytes(got.Headers[i].Value, want.Headers[i].Value) {
				d = append(d, fmt.Sprintf("Headers %s, want %s", showHeaders(got.Headers), showHeaders(want.Headers)))
				break
			}
		}
	}
	return strings.Join(d, "; ")
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func showBytes(b []byte) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", b)
}

func showHeaders(hs []outbox.Header) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s=%q", h.Key, h.Value))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func diffMessage(got, want Message) string {
	var d []string
	if got.Kind != want.Kind {
		d = append(d, fmt.Sprintf("Kind %v, want %v", got.Kind, want.Kind))
	}
	if got.Xid != want.Xid {
		d = append(d, fmt.Sprintf("Xid %d, want %d", got.Xid, want.Xid))
	}
	if got.FinalLSN != want.FinalLSN {
		d = append(d, fmt.Sprintf("FinalLSN %v, want %v", got.FinalLSN, want.FinalLSN))
	}
	if !got.CommitTime.Equal(want.CommitTime) {
		d = append(d, fmt.Sprintf("CommitTime %v, want %v", got.CommitTime, want.CommitTime))
	}
	if got.CommitLSN != want.CommitLSN {
		d = append(d, fmt.Sprintf("CommitLSN %v, want %v", got.CommitLSN, want.CommitLSN))
	}
	if got.EndLSN != want.EndLSN {
		d = append(d, fmt.Sprintf("EndLSN %v, want %v", got.EndLSN, want.EndLSN))
	}
	if e := diffEvent(got.Event, want.Event); e != "" {
		d = append(d, "Event: "+e)
	}
	return strings.Join(d, "; ")
}

// outboxEvent is the event the default outbox table yields for id 42.
func outboxEvent(key, value []byte, headers ...outbox.Header) Message {
	return Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000,
		Table: "public.outbox", Topic: "orders", Key: key, Value: value,
		Headers: append([]outbox.Header{hdr("id", "42")}, headers...), CommitTime: testCommitTime,
	}}
}

const (
	testKey     = "6f1c2a3e-8d4b-4c5a-9e7f-0a1b2c3d4e5f"
	testPayload = `{"order_id": 1001, "total": 19.98}`
)

func TestDecode(t *testing.T) {
	inTx := [][]byte{outboxRelation(), testBegin()}
	byteaRel := encRelation(16400, "app", "outbox_bin",
		Column{Name: "id", TypeOID: oidInt4}, Column{Name: "topic", TypeOID: oidVarchar}, Column{Name: "aggregate_id", TypeOID: oidText}, Column{Name: "payload", TypeOID: oidBytea})
	byteaInsert := func(payload tv) []byte {
		return encInsert(16400, text("42"), text("orders"), text("k"), payload)
	}
	textRel := encRelation(16401, "public", "outbox_text",
		Column{Name: "id", TypeOID: oidInt2}, Column{Name: "topic", TypeOID: oidText}, Column{Name: "aggregate_id", TypeOID: oidVarchar}, Column{Name: "payload", TypeOID: oidText}, Column{Name: "headers", TypeOID: oidJSON})
	textInsert := func(payload, headers tv) []byte {
		return encInsert(16401, text("42"), text("orders"), text("k"), payload, headers)
	}
	// An outbox table whose aggregate id is a bigint.
	intKeyRel := encRelation(16402, "public", "outbox_intkey",
		Column{Name: "id", TypeOID: oidInt8}, Column{Name: "topic", TypeOID: oidText}, Column{Name: "aggregate_id", TypeOID: oidInt8}, Column{Name: "payload", TypeOID: oidText})
	intKeyEvent := func(key []byte) Message {
		return Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "public.outbox_intkey", Topic: "orders", Key: key,
			Value: []byte("p"), Headers: []outbox.Header{hdr("id", "42")}, CommitTime: testCommitTime}}
	}
	tests := []struct {
		name  string
		cols  Columns
		setup [][]byte // each must decode without error
		in    []byte
		want  Message
		errs  []string // when set: the error must contain each
	}{
		{
			name: "begin",
			in:   testBegin(),
			want: Message{Kind: KindBegin, Xid: 777, FinalLSN: 0x1000, CommitTime: testCommitTime},
		},
		{
			name:  "commit",
			setup: [][]byte{testBegin()},
			in:    testCommit(),
			want:  Message{Kind: KindCommit, CommitLSN: 0x1000, EndLSN: 0x1030, CommitTime: testCommitTime},
		},
		{
			name: "relation is ignored",
			in:   outboxRelation(),
			want: Message{Kind: KindIgnored},
		},
		{
			name:  "insert with headers: order as in the text, strings unescaped, other values as JSON text",
			setup: inTx,
			in: outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload),
				text(`{"trace-id": "abc", "attempt": 3, "ok": true, "nested": {"a": [1, "]}"]}, "n": null, "esc": "a\"b\\n\u00e9", "f": -1.5e3, "e": ""}`)),
			want: outboxEvent([]byte(testKey), []byte(testPayload),
				hdr("trace-id", "abc"), hdr("attempt", "3"), hdr("ok", "true"), hdr("nested", `{"a": [1, "]}"]}`),
				hdr("n", "null"), hdr("esc", `a"b\né`), hdr("f", "-1.5e3"), hdr("e", "")),
		},
		{
			name:  "headers: whitespace of a json column, escaped key",
			setup: [][]byte{textRel, testBegin()},
			in:    textInsert(text("hello"), text(" {\n\t\"b\" : \"1\" ,\r\n \"a\\u0041\":[ ] } ")),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "public.outbox_text", Topic: "orders", Key: []byte("k"),
				Value: []byte("hello"), Headers: []outbox.Header{hdr("id", "42"), hdr("b", "1"), hdr("aA", "[ ]")}, CommitTime: testCommitTime}},
		},
		{
			name:  "headers: duplicate keys of a json column are kept",
			setup: [][]byte{textRel, testBegin()},
			in:    textInsert(text("p"), text(`{"a": "1", "a": "2"}`)),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "public.outbox_text", Topic: "orders", Key: []byte("k"),
				Value: []byte("p"), Headers: []outbox.Header{hdr("id", "42"), hdr("a", "1"), hdr("a", "2")}, CommitTime: testCommitTime}},
		},
		{
			name:  "null headers: only the id header",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), null),
			want:  outboxEvent([]byte(testKey), []byte(testPayload)),
		},
		{
			name:  "empty headers object",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(" { } ")),
			want:  outboxEvent([]byte(testKey), []byte(testPayload)),
		},
		{
			name:  "table without a headers column",
			setup: [][]byte{byteaRel, testBegin()},
			in:    byteaInsert(text(`\x00ff10`)),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "app.outbox_bin", Topic: "orders", Key: []byte("k"),
				Value: []byte{0, 0xff, 0x10}, Headers: []outbox.Header{hdr("id", "42")}, CommitTime: testCommitTime}},
		},
		{
			name:  "bytea empty is an empty value, not a tombstone",
			setup: [][]byte{byteaRel, testBegin()},
			in:    byteaInsert(text(`\x`)),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "app.outbox_bin", Topic: "orders", Key: []byte("k"),
				Value: []byte{}, Headers: []outbox.Header{hdr("id", "42")}, CommitTime: testCommitTime}},
		},
		{
			name:  "bytea in escape format",
			setup: [][]byte{byteaRel, testBegin()},
			in:    byteaInsert(text(`a\\b\001\377c`)),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "app.outbox_bin", Topic: "orders", Key: []byte("k"),
				Value: []byte{'a', '\\', 'b', 1, 0xff, 'c'}, Headers: []outbox.Header{hdr("id", "42")}, CommitTime: testCommitTime}},
		},
		{
			name:  "bytea in binary format is raw",
			setup: [][]byte{byteaRel, testBegin()},
			in:    byteaInsert(bin(`\x00`)),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "app.outbox_bin", Topic: "orders", Key: []byte("k"),
				Value: []byte(`\x00`), Headers: []outbox.Header{hdr("id", "42")}, CommitTime: testCommitTime}},
		},
		{
			name:  "bytea not valid hex",
			setup: [][]byte{byteaRel, testBegin()},
			in:    byteaInsert(text(`\x0g`)),
			errs:  []string{`decoding insert into app.outbox_bin: column "payload": bytea payload is not valid hex`, "(outbox id 42)"},
		},
		{
			name:  "bytea odd hex length",
			setup: [][]byte{byteaRel, testBegin()},
			in:    byteaInsert(text(`\x0`)),
			errs:  []string{`column "payload"`, "not valid hex", "(outbox id 42)"},
		},
		{
			name:  "bytea bad escape",
			setup: [][]byte{byteaRel, testBegin()},
			in:    byteaInsert(text(`a\9`)),
			errs:  []string{`column "payload"`, "escape format", "(outbox id 42)"},
		},
		{
			name:  "null key",
			setup: inTx,
			in:    outboxInsert(text("42"), null, text("orders"), text(testPayload), null),
			want:  outboxEvent(nil, []byte(testPayload)),
		},
		// Regression (issue 37): the key column could not be an integer,
		// the most common aggregate id, and there was no keyless option.
		{
			name:  "integer key, text format",
			setup: [][]byte{intKeyRel, testBegin()},
			in:    encInsert(16402, text("42"), text("orders"), text("9000000000"), text("p")),
			want:  intKeyEvent([]byte("9000000000")),
		},
		{
			name:  "integer key, binary format: its decimal text",
			setup: [][]byte{intKeyRel, testBegin()},
			in:    encInsert(16402, text("42"), text("orders"), bin("\x00\x00\x00\x02\x18\x71\x1a\x00"), text("p")),
			want:  intKeyEvent([]byte("9000000000")),
		},
		{
			name:  "integer key, binary format of the wrong length",
			setup: [][]byte{intKeyRel, testBegin()},
			in:    encInsert(16402, text("42"), text("orders"), bin("\x01\x02"), text("p")),
			errs:  []string{`column "aggregate_id": key:`, "(outbox id 42)"},
		},
		{
			name:  "no key",
			cols:  Columns{NoKey: true},
			setup: [][]byte{intKeyRel, testBegin()},
			in:    encInsert(16402, text("42"), text("orders"), text("9000000000"), text("p")),
			want:  intKeyEvent(nil),
		},
		{
			name:  "empty key is not null",
			setup: [][]byte{textRel, testBegin()},
			in:    encInsert(16401, text("42"), text("orders"), text(""), text("p"), null),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "public.outbox_text", Topic: "orders", Key: []byte{},
				Value: []byte("p"), Headers: []outbox.Header{hdr("id", "42")}, CommitTime: testCommitTime}},
		},
		{
			name:  "null payload is a tombstone",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), null, null),
			want:  outboxEvent([]byte(testKey), nil),
		},
		{
			name:  "binary formats: id, uuid key, jsonb payload and headers",
			setup: inTx,
			in: outboxInsert(bin("\x00\x00\x00\x00\x00\x00\x00\x2a"),
				bin("\x6f\x1c\x2a\x3e\x8d\x4b\x4c\x5a\x9e\x7f\x0a\x1b\x2c\x3d\x4e\x5f"), bin("orders"),
				bin("\x01"+testPayload), bin("\x01"+`{"a": "b"}`)),
			want: outboxEvent([]byte(testKey), []byte(testPayload), hdr("a", "b")),
		},
		{
			name:  "negative id",
			setup: inTx,
			in:    outboxInsert(text("-7"), text(testKey), text("orders"), text(testPayload), null),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "public.outbox", Topic: "orders", Key: []byte(testKey),
				Value: []byte(testPayload), Headers: []outbox.Header{hdr("id", "-7")}, CommitTime: testCommitTime}},
		},
		{
			name: "custom column names",
			cols: Columns{ID: "seq", Topic: "destination", Key: "partition_key", Payload: "body", Headers: "meta"},
			setup: [][]byte{encRelation(5, "s", "events",
				Column{Name: "body", TypeOID: oidText}, Column{Name: "meta", TypeOID: oidJSON}, Column{Name: "destination", TypeOID: oidText}, Column{Name: "partition_key", TypeOID: oidText}, Column{Name: "seq", TypeOID: oidInt8}),
				testBegin()},
			in: encInsert(5, text("hi"), text(`{"x": 1}`), text("t"), text("pk"), text("9")),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "s.events", Topic: "t", Key: []byte("pk"), Value: []byte("hi"),
				Headers: []outbox.Header{hdr("id", "9"), hdr("x", "1")}, CommitTime: testCommitTime}},
		},
		{
			name:  "null topic",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), null, text(testPayload), null),
			errs:  []string{`decoding insert into public.outbox: column "topic": null topic (outbox id 42)`},
		},
		{
			name:  "empty topic",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text(""), text(testPayload), null),
			errs:  []string{`decoding insert into public.outbox: column "topic": empty topic (outbox id 42)`},
		},
		// Regression (issue 37): a row could name the progress topic and
		// forge exactly-once progress, or a Kafka internal topic.
		{
			name:  "a Kafka internal topic",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("__consumer_offsets"), text(testPayload), null),
			errs:  []string{`decoding insert into public.outbox: column "topic": topic "__consumer_offsets" is a Kafka internal topic`, "(outbox id 42)"},
		},
		{
			name:  "the progress topic",
			cols:  Columns{ReservedTopics: []string{"outboxd.progress", "outboxd.dead"}},
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("outboxd.progress"), text(testPayload), null),
			errs:  []string{`column "topic": topic "outboxd.progress" is reserved for outboxd's own records`, "(outbox id 42)"},
		},
		{
			name:  "the dead-letter topic",
			cols:  Columns{ReservedTopics: []string{"outboxd.progress", "outboxd.dead"}},
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("outboxd.dead"), text(testPayload), null),
			errs:  []string{`column "topic": topic "outboxd.dead" is reserved`},
		},
		{
			name:  "a reserved topic from a template",
			cols:  Columns{TopicTemplate: "__{topic}"},
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{`decoding insert into public.outbox: topic "__orders" is a Kafka internal topic`, "(outbox id 42)"},
		},
		{
			name:  "a topic that only starts with one underscore",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("_orders"), text(testPayload), null),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "public.outbox", Topic: "_orders", Key: []byte(testKey),
				Value: []byte(testPayload), Headers: []outbox.Header{hdr("id", "42")}, CommitTime: testCommitTime}},
		},
		{
			name:  "non-integer id",
			setup: inTx,
			in:    outboxInsert(text("4x2"), text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{`decoding insert into public.outbox: column "id": id "4x2" is not an integer`},
		},
		{
			name:  "id out of range",
			setup: inTx,
			in:    outboxInsert(text("9223372036854775808"), text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{`column "id"`, "not an integer"},
		},
		{
			name:  "null id",
			setup: inTx,
			in:    outboxInsert(null, text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{`decoding insert into public.outbox: column "id": null id`},
		},
		{
			name:  "binary id of the wrong width",
			setup: inTx,
			in:    outboxInsert(bin("\x00\x2a"), text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{`column "id": binary type bigint (oid 20) id is 2 bytes, want 8`},
		},
		{
			name:  "headers an array",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`[{"a": "b"}]`)),
			errs:  []string{`decoding insert into public.outbox: column "headers": headers are a JSON array, want a JSON object (outbox id 42)`},
		},
		{
			name:  "headers a string",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`"a"`)),
			errs:  []string{`column "headers": headers are a JSON string, want a JSON object (outbox id 42)`},
		},
		{
			name:  "headers JSON null",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`null`)),
			errs:  []string{`column "headers": headers are JSON null, want a JSON object (outbox id 42)`},
		},
		{
			name:  "headers not JSON",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`{"a": }`)),
			errs:  []string{`column "headers": headers are not valid JSON (outbox id 42)`},
		},
		{
			name:  "reserved header id",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`{"a": "1", "id": "7"}`)),
			errs:  []string{`decoding insert into public.outbox: column "headers": header "id" is reserved for the outbox id (outbox id 42)`},
		},
		// Regression (issue 37): a row's headers could set the source
		// header outboxd sets, which consumers dedupe on with the id.
		{
			name:  "reserved header outboxd.source",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`{"outboxd.source": "elsewhere"}`)),
			errs:  []string{`column "headers": header "outboxd.source" is reserved for the record's source (outbox id 42)`},
		},
		// Regression (issue 49, item 5): a row of one exactly-once pipeline
		// could carry the header that another's progress reader trusts,
		// naming that pipeline's transactional id, and so forge its
		// progress in a progress topic it can write to.
		{
			name:  "reserved header outboxd-transactional-id",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`{"outboxd-transactional-id": "outboxd-orders"}`)),
			errs:  []string{`column "headers": header "outboxd-transactional-id" is reserved for outboxd's exactly-once progress records (outbox id 42)`},
		},
		{
			name:  "reserved header id, escaped",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`{"i\u0064": 1}`)),
			errs:  []string{`header "id" is reserved`, "(outbox id 42)"},
		},
		{
			name:  "unknown relation",
			setup: [][]byte{testBegin()},
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{"decoding insert: unknown relation id 16384"},
		},
		{
			name:  "insert before any begin",
			setup: [][]byte{outboxRelation()},
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{"decoding insert into public.outbox: insert outside a transaction"},
		},
		{
			name:  "insert after commit",
			setup: [][]byte{outboxRelation(), testBegin(), testCommit()},
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{"insert outside a transaction"},
		},
		{
			name: "commit outside a transaction",
			in:   testCommit(),
			errs: []string{"decoding commit at 0/1000: commit outside a transaction"},
		},
		{
			name:  "begin inside a transaction",
			setup: [][]byte{testBegin()},
			in:    encBegin(0x2000, testCommitTime.Add(time.Second), 778),
			errs:  []string{"decoding begin of transaction 778: transaction 777 is still open"},
		},
		{
			name:  "unchanged TOAST value in an insert",
			setup: inTx,
			in:    outboxInsert(text("42"), text(testKey), text("orders"), unchanged, null),
			errs:  []string{`decoding insert into public.outbox: column "payload": unchanged TOAST value in an insert`},
		},
		{
			name:  "tuple with fewer columns than the relation",
			setup: inTx,
			in:    encInsert(outboxRelID, text("42"), text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{"decoding insert into public.outbox: tuple has 5 columns, the relation message described 6"},
		},
		{
			name:  "insert with a tuple kind other than N",
			setup: inTx,
			in:    msg{'I'}.U32(outboxRelID).U8('K').Tuple(text("42")),
			errs:  []string{`tuple kind 'K', want 'N'`},
		},
		{
			name:  "bad value kind",
			setup: inTx,
			in:    encInsert(outboxRelID, text("42"), tv{Kind: 'x'}, text("orders"), text(testPayload), null, null),
			errs:  []string{`column "aggregate_id": value kind 'x'`},
		},
		{
			name:  "insert with trailing bytes",
			setup: inTx,
			in:    append(outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), null), 0),
			errs:  []string{"decoding insert into public.outbox: 1 unexpected trailing bytes"},
		},
		{
			name: "begin with trailing bytes",
			in:   append(testBegin(), 0),
			errs: []string{"decoding begin: message body is 21 bytes, want 20"},
		},
		{
			name:  "relation missing a column is remembered as unusable",
			setup: [][]byte{testBegin()},
			in: encRelation(9, "public", "outbox", Column{Name: "id", TypeOID: oidInt8}, Column{Name: "aggregate_id", TypeOID: oidUUID},
				Column{Name: "payload", TypeOID: oidJSONB}),
			want: Message{Kind: KindIgnored},
		},
		{
			name: "insert into a relation missing a column",
			setup: [][]byte{encRelation(9, "public", "outbox", Column{Name: "id", TypeOID: oidInt8}, Column{Name: "aggregate_id", TypeOID: oidUUID},
				Column{Name: "payload", TypeOID: oidJSONB}), testBegin()},
			in:   encInsert(9, text("42"), text(testKey), text(testPayload)),
			errs: []string{`decoding insert into public.outbox: table public.outbox: missing topic column "topic" (outbox id 42)`},
		},
		{
			name: "insert into a relation with a column of an unusable type",
			setup: [][]byte{encRelation(9, "public", "outbox", Column{Name: "id", TypeOID: oidInt8}, Column{Name: "aggregate_id", TypeOID: oidUUID},
				Column{Name: "topic", TypeOID: oidInt4}, Column{Name: "payload", TypeOID: oidJSONB}), testBegin()},
			in:   encInsert(9, text("42"), text(testKey), text("7"), text(testPayload)),
			errs: []string{`table public.outbox: topic column "topic" has type integer (oid 23), want text or character varying`},
		},
		{
			name: "insert into a relation with several problems",
			setup: [][]byte{encRelation(9, "public", "outbox", Column{Name: "id", TypeOID: 1700}, Column{Name: "topic", TypeOID: oidText},
				Column{Name: "payload", TypeOID: oidJSONB}, Column{Name: "headers", TypeOID: oidText}), testBegin()},
			in: encInsert(9, text("x"), text("t"), text(testPayload), null),
			errs: []string{
				`table public.outbox: id column "id" has type numeric (oid 1700), want bigint, integer, smallint, uuid, text or character varying`,
				`table public.outbox: missing key column "aggregate_id"`,
				`table public.outbox: headers column "headers" has type text (oid 25), want jsonb or json`,
			},
		},
		{
			name:  "relation re-sent after ALTER TABLE replaces the old one",
			setup: [][]byte{outboxRelation(), testBegin(), encRelation(outboxRelID, "public", "outbox", append(outboxColumns(), Column{Name: "tenant", TypeOID: oidText})...)},
			in:    encInsert(outboxRelID, text("42"), text(testKey), text("orders"), text(testPayload), null, text("2026-01-02"), text("acme")),
			want:  outboxEvent([]byte(testKey), []byte(testPayload)),
		},
		{
			name:  "relation re-sent with columns in another order",
			setup: [][]byte{outboxRelation(), testBegin(), encRelation(outboxRelID, "public", "outbox2", Column{Name: "payload", TypeOID: oidJSON}, Column{Name: "topic", TypeOID: oidText}, Column{Name: "id", TypeOID: oidInt8}, Column{Name: "aggregate_id", TypeOID: oidText})},
			in:    encInsert(outboxRelID, text(testPayload), text("orders"), text("42"), text(testKey)),
			want: Message{Kind: KindEvent, Event: outbox.Event{CommitLSN: 0x1000, Table: "public.outbox2", Topic: "orders", Key: []byte(testKey),
				Value: []byte(testPayload), Headers: []outbox.Header{hdr("id", "42")}, CommitTime: testCommitTime}},
		},
		{
			name:  "insert in the old layout after a relation was replaced",
			setup: [][]byte{outboxRelation(), testBegin(), encRelation(outboxRelID, "public", "outbox", append(outboxColumns(), Column{Name: "tenant", TypeOID: oidText})...)},
			in:    outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), null),
			errs:  []string{"tuple has 6 columns, the relation message described 7"},
		},
		{
			name:  "update ignored",
			setup: inTx,
			in: encUpdate(outboxRelID, 0, nil,
				[]tv{text("42"), text(testKey), text("orders"), unchanged, null, text("x")}),
			want: Message{Kind: KindIgnored},
		},
		{
			name:  "update with old key ignored",
			setup: inTx,
			in:    encUpdate(outboxRelID, 'K', []tv{text("41"), null, null, null, null, null}, []tv{text("42"), null, null, null, null, null}),
			want:  Message{Kind: KindIgnored},
		},
		{
			name:  "delete ignored",
			setup: inTx,
			in:    encDelete(outboxRelID, 'K', text("42"), null, null, null, null, null),
			want:  Message{Kind: KindIgnored},
		},
		{
			name:  "update of an unknown relation ignored",
			setup: [][]byte{testBegin()},
			in:    encUpdate(99, 'O', []tv{text("1")}, []tv{text("2")}),
			want:  Message{Kind: KindIgnored},
		},
		{
			name: "truncate, type, origin, logical message ignored (truncate)",
			in:   encTruncate(1, 2, 3),
			want: Message{Kind: KindIgnored},
		},
		{name: "type ignored", in: encType(16500, "public", "mood"), want: Message{Kind: KindIgnored}},
		{name: "origin ignored", in: encOrigin(0x10, "node_a"), want: Message{Kind: KindIgnored}},
		{name: "logical message ignored", in: encLogicalMessage(true, 0x10, "p", "hello"), want: Message{Kind: KindIgnored}},
		{
			name: "update with a bad tuple kind",
			in:   msg{'U'}.U32(1).U8('X'),
			errs: []string{`decoding update: tuple kind 'X', want 'K', 'O' or 'N'`},
		},
		{
			name: "truncate with a wrong relation count",
			in:   msg{'T'}.U32(2).U8(0).U32(1),
			errs: []string{"decoding truncate: 2 relation ids need 8 bytes, 4 left"},
		},
		{name: "empty message", in: []byte{}, errs: []string{"decoding pgoutput message: empty message"}},
		{name: "nil message", in: nil, errs: []string{"empty message"}},
		{name: "unknown message type", in: []byte("X123"), errs: []string{`unsupported message type 'X' (0x58)`}},
		{name: "stream start unsupported", in: msg{'S'}.U32(1).U8(1), errs: []string{`unsupported message type 'S'`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(tt.cols)
			for i, s := range tt.setup {
				if _, err := d.Decode(s); err != nil {
					t.Fatalf("setup message %d: %v", i, err)
				}
			}
			got, err := d.Decode(tt.in)
			if len(tt.errs) > 0 {
				if err == nil {
					t.Fatalf("Decode = %+v, want an error containing %q", got, tt.errs)
				}
				for _, e := range tt.errs {
					if !strings.Contains(err.Error(), e) {
						t.Errorf("error %q\ndoes not contain %q", err, e)
					}
				}
				if got.Kind != KindIgnored {
					t.Errorf("Kind = %v with an error, want the zero Message", got.Kind)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := diffMessage(got, tt.want); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// A relation an ALTER TABLE made unusable replaces the usable one: its
// inserts are row errors carrying what could be read of the row (for the
// dead-letter topic), never decoded against the old description.
func TestDecodeReplacedRelationUnusable(t *testing.T) {
	d := NewDecoder(DefaultColumns())
	decodeAll(t, d, outboxRelation(), testBegin())
	decodeAll(t, d, encRelation(outboxRelID, "public", "outbox", Column{Name: "id", TypeOID: oidInt8}, Column{Name: "aggregate_id", TypeOID: oidUUID}, Column{Name: "payload", TypeOID: oidJSONB}))
	_, err := d.Decode(encInsert(outboxRelID, text("42"), text(testKey), text(testPayload)))
	var re *RowError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), `missing topic column "topic"`) {
		t.Fatalf("insert after an unusable relation replaced a usable one: err = %v, want a *RowError naming the missing column", err)
	}
	if re.ID != "42" || re.Column != "" || string(re.Key) != testKey || string(re.Value) != testPayload || re.Topic != "" {
		t.Errorf("RowError = %+v, want id 42, the key and the payload, no column, no topic", *re)
	}
}

func decodeAll(t testing.TB, d *Decoder, msgs ...[]byte) []Message {
	t.Helper()
	var out []Message
	for i, m := range msgs {
		got, err := d.Decode(m)
		if err != nil {
			t.Fatalf("message %d (%q): %v", i, m[:min(len(m), 1)], err)
		}
		out = append(out, got)
	}
	return out
}

func TestRowError(t *testing.T) {
	d := NewDecoder(DefaultColumns())
	decodeAll(t, d, outboxRelation(), testBegin())
	_, err := d.Decode(outboxInsert(text("42"), text(testKey), null, text(testPayload), null))
	var re *RowError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T) is not a *RowError", err, err)
	}
	if re.Table != "public.outbox" || re.Column != "topic" || re.ID != "42" || string(re.Key) != testKey || string(re.Value) != testPayload || re.Topic != "" {
		t.Errorf("RowError = %+v, want table, column topic, id 42, the key and the payload", *re)
	}
	in := outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`[1]`))
	_, err = d.Decode(in)
	if !errors.As(err, &re) || re.Column != "headers" || re.Topic != "orders" {
		t.Fatalf("headers an array: error %v, want a *RowError for column headers with the topic", err)
	}
	for i := range in {
		in[i] = 0xAA // the caller reuses the buffer: the row error's bytes are its own
	}
	if string(re.Key) != testKey || string(re.Value) != testPayload {
		t.Errorf("RowError aliases the message: key %q, value %q", re.Key, re.Value)
	}
	_, err = d.Decode(outboxInsert(text("x"), text(testKey), text("t"), text(testPayload), null))
	if !errors.As(err, &re) || re.ID != "" || re.Column != "id" {
		t.Errorf("non-integer id: error %v, want a *RowError for column id without an id", err)
	}
}

// Events carry their position in the stream, (commit LSN, index): the
// resume key where several events share one commit LSN.
func TestEventPosition(t *testing.T) {
	d := NewDecoder(DefaultColumns())
	msgs := decodeAll(t, d, outboxRelation(), testBegin(),
		outboxInsert(text("1"), text(testKey), text("orders"), text(testPayload), null),
		encUpdate(outboxRelID, 0, nil, []tv{text("1"), null, null, null, null, null}),
		outboxInsert(text("2"), text(testKey), text("orders"), text(testPayload), null),
		testCommit(), encBegin(0x2000, testCommitTime, 778),
		outboxInsert(text("3"), text(testKey), text("orders"), text(testPayload), null))
	var got []string
	for _, m := range msgs {
		if m.Kind == KindEvent {
			got = append(got, fmt.Sprintf("%s@%v#%d", m.Event.ID(), m.Event.CommitLSN, m.Event.Index))
		}
	}
	if want := "1@0/1000#0 2@0/1000#1 3@0/2000#0"; strings.Join(got, " ") != want {
		t.Errorf("positions %v, want %s", got, want)
	}
}

// primedDecoder has seen the outbox relation and a Begin.
func primedDecoder(t testing.TB) *Decoder {
	d := NewDecoder(DefaultColumns())
	decodeAll(t, d, outboxRelation(), testBegin())
	return d
}

// The caller reuses the WALData buffer: nothing in an Event may alias it.
func TestEventDoesNotAliasInput(t *testing.T) {
	d := primedDecoder(t)
	in := outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`{"a": "b", "c": [1]}`))
	got, err := d.Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	want := outboxEvent([]byte(testKey), []byte(testPayload), hdr("a", "b"), hdr("c", "[1]"))
	for i := range in {
		in[i] = 0xAA
	}
	if diff := diffMessage(got, want); diff != "" {
		t.Fatalf("after overwriting the input: %s", diff)
	}
	// The slices are capacity-limited: appending to one never changes another.
	_ = append(got.Event.Key, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"...)
	_ = append(got.Event.Headers[0].Value, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"...)
	_ = append(got.Event.Value, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"...)
	_ = append(got.Event.Headers[1].Value, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"...)
	if diff := diffMessage(got, want); diff != "" {
		t.Fatalf("after appending to the event's slices: %s", diff)
	}
	// A second event does not share bytes with the first.
	if _, err := d.Decode(outboxInsert(text("43"), text(testKey), text("orders"), text(`{}`), text(`{"a": "z"}`))); err != nil {
		t.Fatal(err)
	}
	if diff := diffMessage(got, want); diff != "" {
		t.Fatalf("after decoding another event: %s", diff)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindIgnored: "ignored", KindBegin: "begin", KindEvent: "event", KindCommit: "commit", 9: "Kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

// TestDecodeIDTypes: the id header is the id column's text form, whatever
// its type: an integer in decimal, a uuid canonical (also from binary
// format), text as it is. What could never be a stable key is a row error.
func TestDecodeIDTypes(t *testing.T) {
	const uuidText = "4d47e190-0402-4048-bc2c-89dd54343cdc"
	uuidBin := "\x4d\x47\xe1\x90\x04\x02\x40\x48\xbc\x2c\x89\xdd\x54\x34\x3c\xdc"
	tests := []struct {
		name    string
		oid     uint32
		id      tv
		want    string // the id header; "" for an error
		wantErr string
	}{
		{name: "bigint", oid: oidInt8, id: text("-42"), want: "-42"},
		{name: "integer, binary", oid: oidInt4, id: bin("\xff\xff\xff\xfe"), want: "-2"},
		{name: "smallint, binary", oid: oidInt2, id: bin("\x00\x07"), want: "7"},
		{name: "uuid", oid: oidUUID, id: text(uuidText), want: uuidText},
		{name: "uuid, binary", oid: oidUUID, id: bin(uuidBin), want: uuidText},
		{name: "text", oid: oidText, id: text("evt-2026-0001"), want: "evt-2026-0001"},
		{name: "varchar, binary", oid: oidVarchar, id: bin("evt-7"), want: "evt-7"},
		{name: "empty text", oid: oidText, id: text(""), wantErr: "empty id"},
		{name: "null", oid: oidUUID, id: null, wantErr: "null id"},
		{name: "a bigint that is not a number", oid: oidInt8, id: text("4x"), wantErr: `id "4x" is not an integer`},
		{name: "a uuid of the wrong length", oid: oidUUID, id: text("4d47e190"), wantErr: `id "4d47e190" is not a uuid`},
		{name: "a binary uuid of the wrong length", oid: oidUUID, id: bin("\x01\x02"), wantErr: "binary type uuid (oid 2950) id is 2 bytes, want 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(Columns{})
			decodeAll(t, d, encRelation(77, "public", "outbox", Column{Name: "id", TypeOID: tt.oid}, Column{Name: "aggregate_id", TypeOID: oidText},
				Column{Name: "topic", TypeOID: oidText}, Column{Name: "payload", TypeOID: oidJSONB}), testBegin())
			got, err := d.Decode(encInsert(77, tt.id, text("k"), text("t"), text(`{}`)))
			if tt.wantErr != "" {
				var re *RowError
				if !errors.As(err, &re) || re.Column != "id" || re.ID != "" || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want a *RowError for column id saying %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Event.ID() != tt.want || string(got.Event.Headers[0].Value) != tt.want {
				t.Errorf("id %q, header %q, want %q", got.Event.ID(), got.Event.Headers[0].Value, tt.want)
			}
		})
	}
}
