package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/outboxd/outboxd/outbox"
	"strings"
	"testing"
)

// fuzzPriming returns the messages a fuzzed Decoder has seen: the two
// outbox relations captured from PostgreSQL 15 (public.outbox and
// public.outbox_bytea, whose messages are seeds too), the hand-encoded outbox
// relation, and a captured Begin.
func fuzzPriming(t testing.TB) [][]byte {
	return [][]byte{capturedMessage(t, "02-Relation"), capturedMessage(t, "10-Relation"), outboxRelation(),
		capturedMessage(t, "01-Begin")}
}

func primed(t testing.TB, msgs [][]byte) *Decoder {
	d := NewDecoder(DefaultColumns())
	decodeAll(t, d, msgs...)
	return d
}

// cloneEvent deep-copies an event.
func cloneEvent(e outbox.Event) outbox.Event {
	c := e
	c.Key = bytes.Clone(e.Key)
	c.Value = bytes.Clone(e.Value)
	c.Headers = make([]outbox.Header, len(e.Headers))
	for i, h := range e.Headers {
		c.Headers[i] = outbox.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
	}
	return c
}

// FuzzDecode feeds arbitrary bytes to a primed Decoder. It must never panic;
// an event must not alias the input and must start with the id header; and
// when a message decodes without error, every strict prefix of it must be an
// error. The seeds in testdata/fuzz/FuzzDecode/pg15-* were captured from
// PostgreSQL 15.
func FuzzDecode(f *testing.F) {
	f.Add(outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`{"a": "b\"", "c": [1, {"d": null}]}`)))
	f.Add(encInsert(16456, text("7"), text("k"), text("t"), text(`a\\b\001`), text(`{"x": 1}`), text("now")))
	f.Add(encUpdate(outboxRelID, 'O', []tv{text("41"), null}, []tv{text("42"), unchanged}))
	f.Add(encLogicalMessage(true, 0x10, "p", "hello"))
	f.Add(encOrigin(0x10, "node_a"))
	f.Add(testCommit())
	priming := fuzzPriming(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		checkDecode(t, func() *Decoder { return primed(t, priming) }, in)
	})
}

// FuzzDecodeMapped is FuzzDecode for a decoder with a column mapping (topic
// template, header columns, timestamp column) over a table of another shape.
func FuzzDecodeMapped(f *testing.F) {
	ts := text("2026-11-30 22:15:01+00")
	f.Add(eventsInsert(text("7"), text("order"), text("o-1"), text("T"), text(`{}`), text("acme"), ts))
	f.Add(eventsInsert(bin("\x00\x00\x00\x00\x00\x00\x00\x07"), bin("order"), null, text("T"), bin("\x01{}"), null, bin("\x00\x00\x00\x00\x00\x00\x00\x01")))
	f.Add(encRelation(eventsRelID, "public", "events", eventsColumns()[1:]...))
	priming := [][]byte{encRelation(eventsRelID, "public", "events", eventsColumns()...), capturedMessage(f, "01-Begin")}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkDecode(t, func() *Decoder {
			d := NewDecoder(eventsMapping())
			decodeAll(t, d, priming...)
			return d
		}, in)
	})
}

// FuzzDecodeShapes is FuzzDecode for the other shapes (issue 50: each
// shape is a type of its own, and each must keep the invariants): the
// Debezium shape over its table, with the JSON converters, the expanded
// payload, the additional placement and the tracing column, and the
// CloudEvents shape over the default table.
func FuzzDecodeShapes(f *testing.F) {
	f.Add(dzRow(text("order"), text("o-1"), text(`{"n": 1, "items": [1, 2.5, "x"]}`), nil))
	f.Add(dzRow(text(""), null, null, map[string]tv{"occurred_at": text("infinity"), "flag": text("x")}))
	f.Add(outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(`{"ce_type": "x"}`)))
	dz := DebeziumColumns()
	dz.Debezium = Debezium{KeyConverter: ConverterJSON, ValueConverter: ConverterJSON, ExpandJSONPayload: true, TracingSpanContextField: "tracingspancontext",
		AdditionalPlacement: []Placement{{"type", "eventType"}, {"tenant", "tenant"}, {"occurred_at", "at"}, {"local_ms", "ms"}, {"flag", "flag"}, {"day", "day"}}}
	ce := Columns{Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Source: "/orders", Type: "com.example.{topic}"}}
	shapes := []struct {
		cols     Columns
		relation []byte
	}{
		{dz, encRelation(dzRelID, "public", "outbox_debezium", dzColumns()...)},
		{ce, outboxRelation()},
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, sh := range shapes {
			checkDecode(t, func() *Decoder {
				d := NewDecoder(sh.cols)
				decodeAll(t, d, sh.relation, testBegin())
				return d
			}, in)
		}
	})
}

// FuzzDecodeMessages is FuzzDecode for a decoder that takes table-less
// events (a message prefix, and CloudEvents so that the type template is
// resolved from the envelope), primed inside a transaction. The seeds in
// testdata/fuzz/FuzzDecodeMessages/pg15-* were captured from PostgreSQL 15.
func FuzzDecodeMessages(f *testing.F) {
	f.Add(encLogicalMessage(true, 0x2A00, "outboxd.event", `{"topic": "t", "key": "k", "headers": {"a": [1]}, "payload": {"x": null}}`))
	f.Add(encLogicalMessage(false, 0x2A00, "outboxd.event", `{"topic": "t"}`))
	f.Add(encLogicalMessage(true, 0x2A00, "outboxd.event", `{"topic": "t", "headers": {"ce_id": "x"}}`))
	mapping := Columns{MessagePrefix: "outboxd.event", Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Source: "/s", Type: "x.{topic}.{key}"}}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkDecode(t, func() *Decoder {
			d := NewDecoder(mapping)
			decodeAll(t, d, capturedMessageBytes(t, 0))
			return d
		}, in)
	})
}

// checkDecode decodes in with a fresh decoder: it must not panic or modify
// its input; an event must not alias the input, must start with the id
// header and have a topic; and when in decodes without error, every strict
// prefix of it must be an error.
func checkDecode(t *testing.T, fresh func() *Decoder, in []byte) {
	orig := bytes.Clone(in)
	got, err := fresh().Decode(in)
	if !bytes.Equal(in, orig) {
		t.Fatal("Decode modified its input")
	}
	if err != nil {
		if got.Kind != KindIgnored {
			t.Fatalf("Kind %v with error %v", got.Kind, err)
		}
		return
	}
	if got.Kind == KindEvent {
		ev := got.Event
		if len(ev.Headers) == 0 || ev.Headers[0].Key != "id" {
			t.Fatalf("event headers %s do not start with id", showHeaders(ev.Headers))
		}
		if ev.Topic == "" {
			t.Fatal("event with an empty topic")
		}
		want := cloneEvent(ev)
		for i := range in {
			in[i] ^= 0xff
		}
		if diff := diffEvent(ev, want); diff != "" {
			t.Fatalf("event aliases the input: %s", diff)
		}
		copy(in, orig)
	}
	if len(in) > 4096 {
		return // keep the quadratic check below cheap
	}
	for n := 0; n < len(in); n++ {
		if p, err := fresh().Decode(in[:n]); err == nil {
			t.Fatalf("prefix of %d/%d bytes of a valid %v message decodes as %v without error", n, len(in), got.Kind, p.Kind)
		}
	}
}

// FuzzHeaders decodes inserts whose headers column holds arbitrary text and
// compares the headers with a reference built on encoding/json's Decoder.
func FuzzHeaders(f *testing.F) {
	for _, s := range []string{
		`{"trace-id": "abc", "attempt": 3, "ok": true, "nested": {"a": [1, "]}"]}, "n": null}`,
		`{"esc": "a\"b\\n\u00e9\ud83d\ude00", "k\u0041": "v"}`,
		` { "a" : [ 1 , 2 ] , "b":"" } `, `{}`, `[]`, `"x"`, `{"id": 1}`, `{"a": "\ud800"}`, "{\"a\": \"\xff\"}",
	} {
		f.Add(s)
	}
	priming := [][]byte{outboxRelation(), testBegin()}
	f.Fuzz(func(t *testing.T, headers string) {
		in := outboxInsert(text("42"), text(testKey), text("orders"), text(testPayload), text(headers))
		got, err := primed(t, priming).Decode(in)
		want, wantErr := referenceHeaders(headers)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("headers %q: Decode error %v, reference error %v", headers, err, wantErr)
		}
		if err != nil {
			return
		}
		if diff := diffEvent(got.Event, outboxEvent([]byte(testKey), []byte(testPayload), want...).Event); diff != "" {
			t.Fatalf("headers %q: %s", headers, diff)
		}
	})
}

// referenceHeaders is what appendHeaders should return, built with
// encoding/json's token API.
func referenceHeaders(s string) ([]outbox.Header, error) {
	if !json.Valid([]byte(s)) {
		return nil, errors.New("not valid JSON")
	}
	dec := json.NewDecoder(strings.NewReader(s))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errors.New("not an object")
	}
	var hs []outbox.Header
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		if key == "id" {
			return nil, errors.New("reserved id")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		v := []byte(raw)
		if raw[0] == '"' {
			var str string
			if err := json.Unmarshal(raw, &str); err != nil {
				return nil, err
			}
			v = []byte(str)
		}
		hs = append(hs, outbox.Header{Key: key, Value: v})
	}
	return hs, nil
}

// FuzzDebeziumExpand decodes rows of Debezium's outbox table whose payload
// holds arbitrary text, with --layout debezium expanding the JSON payload
// and JSON converters: it must never panic, and a value it publishes must
// be valid JSON (JsonConverter only writes JSON).
func FuzzDebeziumExpand(f *testing.F) {
	for _, s := range []string{`{"a": [1, null, {"b": 1.5e-7}], "c": "\u00e9\ud83d\ude00"}`, `[{"p": 1}, {"q": 2}]`, `{"x": []}`, `42`, `{`,
		`{"rows": [{"a": 1}, {"a": "x"}]}`, `{"n": 123456789012345678901234567890}`, `{"d": -0.0, "e": 1e400}`} {
		f.Add(s)
	}
	dz := Debezium{KeyConverter: ConverterJSON, ValueConverter: ConverterJSON, ExpandJSONPayload: true}
	f.Fuzz(func(t *testing.T, payload string) {
		d := dzDecoder(t, dz)
		got, err := d.Decode(dzRow(text("Order"), text("k"), text(payload), nil))
		if err != nil {
			var re *RowError
			if !errors.As(err, &re) {
				t.Fatalf("payload %q: %v, want a *RowError", payload, err)
			}
			return
		}
		if !json.Valid(got.Event.Value) {
			t.Fatalf("payload %q: value %q is not JSON", payload, got.Event.Value)
		}
	})
}
