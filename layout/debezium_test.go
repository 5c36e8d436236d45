package layout

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/outbox"
)

// The expected records below are Debezium 3.6.1's, as recorded by
// `make compare-debezium` (docs/debezium/results.json) for the same rows.

const dzRelID = 16500

func dzColumns() []Column {
	return []Column{
		{Name: "id", TypeOID: oidUUID, TypeMod: -1}, {Name: "aggregatetype", TypeOID: oidText, TypeMod: -1},
		{Name: "aggregateid", TypeOID: oidText, TypeMod: -1}, {Name: "type", TypeOID: oidText, TypeMod: -1},
		{Name: "payload", TypeOID: oidJSONB, TypeMod: -1}, {Name: "tenant", TypeOID: oidInt4, TypeMod: -1},
		{Name: "occurred_at", TypeOID: oidTimestamptz, TypeMod: -1}, {Name: "occurred_ms", TypeOID: oidTimestamptz, TypeMod: 3},
		{Name: "local_at", TypeOID: oidTimestamp, TypeMod: -1}, {Name: "local_ms", TypeOID: oidTimestamp, TypeMod: 3},
		{Name: "flag", TypeOID: oidBool, TypeMod: -1}, {Name: "day", TypeOID: oidDate, TypeMod: -1},
		{Name: "note", TypeOID: oidText, TypeMod: -1}, {Name: "tracingspancontext", TypeOID: oidText, TypeMod: -1},
	}
}

const dzID = "4d47e190-0402-4048-bc2c-89dd54343cdc"

// dzRow is an insert into the table of dzColumns; mod changes the values
// (by column name) of a row whose placed columns all have values.
func dzRow(aggType, aggID tv, payload tv, mod map[string]tv) []byte {
	vals := map[string]tv{"id": text(dzID), "aggregatetype": aggType, "aggregateid": aggID, "type": text("OrderCreated"), "payload": payload,
		"tenant": text("7"), "occurred_at": text("2026-12-02 10:11:12.345678+01"), "occurred_ms": text("2026-12-02 10:11:12.345+00"),
		"local_at": text("2026-12-02 10:11:12.345678"), "local_ms": text("2026-12-02 10:11:12.3"), "flag": text("t"), "day": text("2026-12-02"),
		"note": text("first"), "tracingspancontext": text("traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\ntracestate=congo=t61rcWkgMzE")}
	for k, v := range mod {
		vals[k] = v
	}
	var vs []tv
	for _, c := range dzColumns() {
		vs = append(vs, vals[c.Name])
	}
	return encInsert(dzRelID, vs...)
}

func dzDecoder(t *testing.T, dz Debezium) *Decoder {
	t.Helper()
	m := DebeziumColumns()
	m.Shape, m.Debezium = ShapeDebezium, dz
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(m)
	decodeAll(t, d, encRelation(dzRelID, "public", "outbox_debezium", dzColumns()...), testBegin())
	return d
}

const placement = "type:header:eventType,tenant:header,occurred_at:header,occurred_ms:header,local_at:header,local_ms:header,flag:header,day:header:businessDay,note:header"

func TestDecodeDebezium(t *testing.T) {
	placed, err := ParsePlacements(placement)
	if err != nil {
		t.Fatal(err)
	}
	nullHeaders := map[string]tv{"tenant": null, "occurred_at": null, "occurred_ms": null, "local_at": null, "local_ms": null, "flag": text("f"), "day": null, "note": null}
	strConv := Debezium{}
	jsonConv := Debezium{KeyConverter: ConverterJSON, ValueConverter: ConverterJSON, AdditionalPlacement: placed}
	expand := Debezium{RouteByField: "type", RouteTopicReplacement: "events.${routedByValue}", ValueConverter: ConverterJSON, ExpandJSONPayload: true}
	numbers := `{"e": 0.000000123, "f": 1.50, "g": 100.0, "h": 1234567.5, "i": 7, "big": 12345678901, "mid": 12345678.9, "neg": -3, "tiny": 0.0001, "zero": 0}`
	nulls := `{"n": null, "ea": [], "eo": {}, "arr": [1, null, 3], "nested": {"a": {"b": null, "c": [true, false]}}}`
	escapes := `{"c": "\u001f\u0001", "s": "a\"b\\c\nd\te/f", "u": "café ☕ 😀", "k\"ey": "v"}`
	tests := []struct {
		name       string
		dz         Debezium
		in         []byte
		topic, key string // key "\x00": none
		value      string // "\x00": none
		headers    []outbox.Header
	}{
		{name: "defaults: the payload's text", dz: strConv, in: dzRow(text("Customer"), text("c-ü-42"), text(numbers), nil),
			topic: "outbox.event.Customer", key: "c-ü-42", value: numbers},
		{name: "defaults: an empty route value, an empty key", dz: strConv, in: dzRow(text(""), text(""), text(nulls), nil),
			topic: "outbox.event.", key: "", value: nulls},
		{name: "defaults: no key, no payload", dz: strConv, in: dzRow(text("order"), null, null, nil),
			topic: "outbox.event.order", key: "\x00", value: "\x00"},
		{name: "JSON converters: strings, a null key, every placed type", dz: jsonConv, in: dzRow(text("Order"), null, text(escapes), nil),
			topic: "outbox.event.Order", key: "null",
			value: `"{\"c\": \"\\u001f\\u0001\", \"s\": \"a\\\"b\\\\c\\nd\\te/f\", \"u\": \"café ☕ \uD83D\uDE00\", \"k\\\"ey\": \"v\"}"`,
			headers: []outbox.Header{hdr("eventType", "OrderCreated"), hdr("tenant", "7"), hdr("occurred_at", "2026-12-02T09:11:12.345678Z"),
				hdr("occurred_ms", "2026-12-02T10:11:12.345Z"), hdr("local_at", "1796206272345678"), hdr("local_ms", "1796206272300"),
				hdr("flag", "true"), hdr("businessDay", "20789"), hdr("note", "first")}},
		{name: "JSON converters: null header values, a null payload", dz: jsonConv, in: dzRow(text("Customer"), text("c-ü-42"), null, nullHeaders),
			topic: "outbox.event.Customer", key: `"c-ü-42"`, value: "null",
			headers: []outbox.Header{hdr("eventType", "OrderCreated"), {Key: "tenant"}, {Key: "occurred_at"}, {Key: "occurred_ms"}, {Key: "local_at"},
				{Key: "local_ms"}, hdr("flag", "false"), {Key: "businessDay"}, {Key: "note"}}},
		{name: "an offset with seconds (a historical time zone)", dz: jsonConv,
			in:    dzRow(text("Order"), text("1"), text(`{}`), map[string]tv{"occurred_at": text("1900-01-01 00:00:00+00:53:28"), "occurred_ms": text("1900-01-01 00:00:00.5-00:00:28")}),
			topic: "outbox.event.Order", key: `"1"`, value: `"{}"`,
			headers: []outbox.Header{hdr("eventType", "OrderCreated"), hdr("tenant", "7"), hdr("occurred_at", "1899-12-31T23:06:32.000000Z"),
				hdr("occurred_ms", "1900-01-01T00:00:28.500Z"), hdr("local_at", "1796206272345678"), hdr("local_ms", "1796206272300"),
				hdr("flag", "true"), hdr("businessDay", "20789"), hdr("note", "first")}},
		{name: "expanded: numbers", dz: expand, in: dzRow(text("Customer"), text("c-ü-42"), text(numbers), nil),
			topic: "events.OrderCreated", key: "c-ü-42",
			value: `{"e":1.23E-7,"f":1.5,"g":100.0,"h":1234567.5,"i":7,"big":12345678901,"mid":1.23456789E7,"neg":-3,"tiny":1.0E-4,"zero":0}`},
		{name: "expanded: nulls and empty arrays left out", dz: expand, in: dzRow(text(""), text(""), text(nulls), nil),
			topic: "events.OrderCreated", key: "", value: `{"eo":{},"arr":[1,null,3],"nested":{"a":{"c":[true,false]}}}`},
		{name: "expanded: escapes", dz: expand, in: dzRow(text("Order"), text("1"), text(escapes), nil),
			topic: "events.OrderCreated", key: "1", value: `{"c":"\u001F\u0001","s":"a\"b\\c\nd\te/f","u":"café ☕ \uD83D\uDE00","k\"ey":"v"}`},
		{name: "expanded: arrays of arrays and of objects", dz: expand,
			in:    dzRow(text("order"), null, text(`{"aa": [[1, 2], [3]], "rows": [{"p": 1, "q": "x"}, {"p": 2, "q": "y"}]}`), nil),
			topic: "events.OrderCreated", key: "\x00", value: `{"aa":[[1,2],[3]],"rows":[{"p":1,"q":"x"},{"p":2,"q":"y"}]}`},
		{name: "expanded: a mixed array leaves the payload a string", dz: expand, in: dzRow(text("Order"), text("1"), text(`{"l": [1, 12345678901], "m": [1, "a"]}`), nil),
			topic: "events.OrderCreated", key: "1", value: `"{\"l\": [1, 12345678901], \"m\": [1, \"a\"]}"`},
		{name: "expanded: a scalar stays a string", dz: expand, in: dzRow(text("Order"), text("1"), text(`"just a string"`), nil),
			topic: "events.OrderCreated", key: "1", value: `"\"just a string\""`},
		{name: "expanded: an empty top-level array stays a string", dz: expand, in: dzRow(text("Order"), text("1"), text(`[]`), nil),
			topic: "events.OrderCreated", key: "1", value: `"[]"`},
		{name: "expanded: an empty object", dz: expand, in: dzRow(text("Order"), text("1"), text(`{}`), nil),
			topic: "events.OrderCreated", key: "1", value: `{}`},
		{name: "expanded: no payload", dz: expand, in: dzRow(text("Order"), text("1"), null, map[string]tv{"type": text("OrderDeleted")}),
			topic: "events.OrderDeleted", key: "1", value: "null"},
		{name: "tracing context passed through", dz: Debezium{TracingSpanContextField: "tracingspancontext"}, in: dzRow(text("Order"), text("1"), text(`{}`), nil),
			topic: "outbox.event.Order", key: "1", value: `{}`,
			headers: []outbox.Header{hdr("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), hdr("tracestate", "congo=t61rcWkgMzE")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := dzDecoder(t, tt.dz).Decode(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			ev := got.Event
			bytesOr := func(b []byte) string {
				if b == nil {
					return "\x00"
				}
				return string(b)
			}
			if ev.Topic != tt.topic || bytesOr(ev.Key) != tt.key || bytesOr(ev.Value) != tt.value {
				t.Errorf("topic %q key %q value %q\nwant %q %q %q", ev.Topic, bytesOr(ev.Key), bytesOr(ev.Value), tt.topic, tt.key, tt.value)
			}
			want := append([]outbox.Header{hdr("id", dzID)}, tt.headers...)
			if showHeaders(ev.Headers) != showHeaders(want) {
				t.Errorf("headers %s\nwant %s", showHeaders(ev.Headers), showHeaders(want))
			}
		})
	}
}

// Rows on which Debezium's task fails with the expansion on are refused,
// never published in another shape.
func TestDecodeDebeziumRefusesWhatDebeziumFailsOn(t *testing.T) {
	expand := Debezium{ValueConverter: ConverterJSON, ExpandJSONPayload: true}
	for _, payload := range []string{`[1, 2, 3]`, `{"a": 1, "big": 123456789012345678901234567890}`, `{"rows": [{"a": 1}, {"a": "x"}]}`} {
		_, err := dzDecoder(t, expand).Decode(dzRow(text("Order"), text("1"), text(payload), nil))
		var re *RowError
		if !errors.As(err, &re) || re.Column != "payload" || re.ID != dzID {
			t.Errorf("payload %s: %v, want a *RowError for the payload", payload, err)
		}
	}
	// A route column of NULL: Debezium fails, outboxd refuses the row.
	_, err := dzDecoder(t, Debezium{}).Decode(dzRow(null, text("1"), text(`{}`), nil))
	var re *RowError
	if !errors.As(err, &re) || re.Column != "aggregatetype" {
		t.Errorf("NULL aggregatetype: %v, want a *RowError for it", err)
	}
}

func TestDebeziumValidate(t *testing.T) {
	tests := []struct {
		name string
		dz   Debezium
		cols Columns
		want string
	}{
		{"expansion needs the JSON converter", Debezium{ExpandJSONPayload: true}, Columns{}, "needs the json value converter"},
		{"an unknown converter", Debezium{KeyConverter: "avro"}, Columns{}, `key converter "avro"`},
		{"another group reference", Debezium{RouteTopicReplacement: "t.$1"}, Columns{}, "only ${routedByValue}"},
		{"a header twice", Debezium{AdditionalPlacement: []Placement{{"type", "t"}, {"tenant", "t"}}}, Columns{}, `header "t" twice`},
		{"the id header", Debezium{AdditionalPlacement: []Placement{{"type", "id"}}}, Columns{}, `header "id" twice`},
		// Regression (issue 37, review): an alias could name the source
		// header outboxd sets.
		{"the source header", Debezium{AdditionalPlacement: []Placement{{"type", "outboxd.source"}}}, Columns{}, `header "outboxd.source" twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cols
			c.Shape, c.Debezium = ShapeDebezium, tt.dz
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want %s", err, tt.want)
			}
		})
	}
	for _, bad := range []string{"type:envelope:eventType", "part:partition", "type", "type:somewhere", ":header"} {
		if _, err := ParsePlacements(bad); err == nil {
			t.Errorf("ParsePlacements(%q) accepted", bad)
		}
	}
	// A placed column whose type has no known header form is refused at
	// the Relation, naming it.
	m := DebeziumColumns()
	m.Shape, m.Debezium = ShapeDebezium, Debezium{AdditionalPlacement: []Placement{{"amount", "amount"}}}
	err := ValidateTable("public.outbox_debezium", append(dzColumns(), Column{Name: "amount", TypeOID: 1700}), m)
	if err == nil || !strings.Contains(err.Error(), `additional placement column "amount" has type numeric`) {
		t.Errorf("ValidateTable = %v, want the numeric column refused", err)
	}
}

func TestJavaDouble(t *testing.T) {
	for _, tt := range []struct {
		f    float64
		want string
	}{
		{1.5, "1.5"}, {100, "100.0"}, {0.001, "0.001"}, {0.0001, "1.0E-4"}, {1.23e-7, "1.23E-7"}, {9999999, "9999999.0"},
		{1e7, "1.0E7"}, {12345678.9, "1.23456789E7"}, {-1234567.5, "-1234567.5"}, {0, "0.0"}, {1.5e300, "1.5E300"}, {5e-324, "4.9E-324"}, {1e-323, "9.9E-324"}, {1, "1.0"}, {0.1, "0.1"}, {123.456, "123.456"},
	} {
		if got := string(appendJavaDouble(nil, tt.f)); got != tt.want {
			t.Errorf("appendJavaDouble(%v) = %s, want %s", tt.f, got, tt.want)
		}
	}
}

func TestTracingHeaders(t *testing.T) {
	got := tracingHeaders([]byte("# a comment\ntraceparent = 00-a-b-01\r\nother=x\n  tracestate:k=v,l=w\n"))
	if showHeaders(got) != showHeaders([]outbox.Header{hdr("traceparent", "00-a-b-01"), hdr("tracestate", "k=v,l=w")}) {
		t.Errorf("tracingHeaders = %s", showHeaders(got))
	}
}

// Regression (issue 37, review): with the JSON key converter an integer
// key was written as a string ("17") where Debezium's JsonConverter writes
// a number (17), so the default partitioner put it on another partition
// than Debezium did; and --no-key wrote the key null for every record,
// sending all of them to one partition.
func TestDecodeDebeziumIntegerKeyAndNoKey(t *testing.T) {
	cols := []Column{{Name: "id", TypeOID: oidUUID, TypeMod: -1}, {Name: "aggregatetype", TypeOID: oidVarchar, TypeMod: -1},
		{Name: "aggregateid", TypeOID: oidInt8, TypeMod: -1}, {Name: "type", TypeOID: oidVarchar, TypeMod: -1}, {Name: "payload", TypeOID: oidJSONB, TypeMod: -1}}
	for _, tc := range []struct {
		name  string
		noKey bool
		key   []byte
	}{
		{"an integer key is a JSON number", false, []byte("17")},
		{"no key at all", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := DebeziumColumns()
			m.Shape, m.Debezium = ShapeDebezium, Debezium{KeyConverter: ConverterJSON}
			m.NoKey = tc.noKey
			d := NewDecoder(m)
			decodeAll(t, d, encRelation(77, "public", "outbox_intkey", cols...), testBegin())
			got, err := d.Decode(encInsert(77, text(dzID), text("Order"), text("17"), text("OrderCreated"), text(`{}`)))
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Event.Key) != string(tc.key) || (tc.key == nil) != (got.Event.Key == nil) {
				t.Errorf("key %q, want %q", got.Event.Key, tc.key)
			}
		})
	}
}
