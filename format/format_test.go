package format_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/format"
)

const orderAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"id","type":"long"},
	{"name":"customer","type":"string"},
	{"name":"total","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
	{"name":"placed","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
	{"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
		{"name":"sku","type":"string"},{"name":"qty","type":"int"}]}}},
	{"name":"note","type":["null","string"],"default":null},
	{"name":"tags","type":{"type":"map","values":"string"},"default":{}},
	{"name":"ratio","type":"double","default":1.5}
]}`

const orderProto = `syntax = "proto3";
package shop;
message Other { string x = 1; }
message Order {
  int64 id = 1;
  string customer = 2;
  repeated Item items = 3;
  message Item { string sku = 1; int32 qty = 2; }
}`

const orderJSONSchema = `{"type":"object","properties":{
	"id":{"type":"integer"},"customer":{"type":"string"}},
	"required":["id","customer"],"additionalProperties":false}`

func codec(t *testing.T, s format.Schema) *format.Codec {
	t.Helper()
	c, err := format.New(s)
	if err != nil {
		t.Fatalf("New(%s): %v", s.Format, err)
	}
	return c
}

// sameJSON compares two JSON texts as values.
func sameJSON(t *testing.T, got, want string) {
	t.Helper()
	if !json.Valid([]byte(want)) { // a string schema's text, as it is
		if got != want {
			t.Errorf("decoded %q, want %q", got, want)
		}
		return
	}
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("decoded %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("decoded\n %s\nwant\n %s", got, want)
	}
}

func TestEncodeThenDecodeGivesThePayloadBack(t *testing.T) {
	cases := []struct {
		name   string
		schema format.Schema
		in     string
		want   string // the decoded JSON; "" for in
		header []byte // the wire header expected for id 7
	}{
		{"avro record", format.Schema{Format: format.Avro, Text: orderAvro},
			`{"id":9007199254740993,"customer":"ann","total":"12.30","placed":"2026-12-05T10:00:00.5Z","status":"PAID",
			  "items":[{"sku":"a","qty":2}],"note":"hi","tags":{"k":"v"}}`,
			`{"id":9007199254740993,"customer":"ann","total":12.30,"placed":1796464800500,"status":"PAID",
			  "items":[{"sku":"a","qty":2}],"note":"hi","tags":{"k":"v"},"ratio":1.5}`,
			[]byte{0, 0, 0, 0, 7}},
		{"avro defaults and null", format.Schema{Format: format.Avro, Text: orderAvro},
			`{"id":1,"customer":"b","total":5,"placed":0,"status":"NEW","items":[],"note":null}`,
			`{"id":1,"customer":"b","total":5.00,"placed":0,"status":"NEW","items":[],"note":null,"tags":{},"ratio":1.5}`,
			[]byte{0, 0, 0, 0, 7}},
		{"avro every type", format.Schema{Format: format.Avro, Text: `{"type":"record","name":"All","fields":[
			{"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"f","type":"float"},{"name":"d","type":"double"},
			{"name":"by","type":"bytes"},{"name":"fx","type":{"type":"fixed","name":"F3","size":3}},
			{"name":"day","type":{"type":"int","logicalType":"date"}},{"name":"ms","type":{"type":"int","logicalType":"time-millis"}},
			{"name":"us","type":{"type":"long","logicalType":"timestamp-micros"}},
			{"name":"u","type":["null",{"type":"record","name":"A","fields":[{"name":"a","type":"int"}]},{"type":"record","name":"B","fields":[{"name":"b","type":"string"}]}]},
			{"name":"m","type":{"type":"map","values":["null","long"]}},
			{"name":"nested","type":{"type":"record","name":"N","fields":[{"name":"x","type":"int","default":7}]}},
			{"name":"neg","type":{"type":"bytes","logicalType":"decimal","precision":5,"scale":1}}]}`},
			`{"b":true,"i":-5,"f":1.5,"d":-2.25,"by":"\u00ff\u0000a","fx":"abc","day":"1969-12-31","ms":1500,"us":"1970-01-01T00:00:01.000002Z",
			  "u":{"b":"x"},"m":{"k":null,"j":-3},"nested":{},"neg":"-12.5"}`,
			`{"b":true,"i":-5,"f":1.5,"d":-2.25,"by":"\u00ff\u0000a","fx":"abc","day":-1,"ms":1500,"us":1000002,
			  "u":{"b":"x"},"m":{"k":null,"j":-3},"nested":{"x":7},"neg":-12.5}`,
			[]byte{0, 0, 0, 0, 7}},
		{"avro defaults of same-named fields differ", format.Schema{Format: format.Avro, Text: `{"type":"record","name":"R","fields":[
			{"name":"a","type":{"type":"record","name":"A","fields":[{"name":"currency","type":"string","default":"USD"}]}},
			{"name":"b","type":{"type":"record","name":"B","fields":[{"name":"currency","type":"string","default":"EUR"}]}},
			{"name":"t","type":[{"type":"long","logicalType":"timestamp-millis"},"null"],"default":5},
			{"name":"e","type":[{"type":"enum","name":"E","symbols":["X","Y"]},"null"],"default":"Y"}]}`},
			`{"a":{},"b":{}}`, `{"a":{"currency":"USD"},"b":{"currency":"EUR"},"t":5,"e":"Y"}`, []byte{0, 0, 0, 0, 7}},
		{"escaped pairs and escaped backslashes", format.Schema{Format: format.Avro, Text: `{"type":"record","name":"S","fields":[{"name":"s","type":"string"}]}`},
			`{"s":"\ud83d\ude00 \\ud800 \u00e9"}`, "", []byte{0, 0, 0, 0, 7}},
		{"protobuf importing a well-known type", format.Schema{Format: format.Protobuf,
			Text: "syntax = \"proto3\";\nimport \"google/protobuf/timestamp.proto\";\nmessage E { google.protobuf.Timestamp at = 1; }"},
			`{"at":"2026-12-05T10:00:00Z"}`, "", []byte{0, 0, 0, 0, 7, 0}},
		{"json schema relative reference", format.Schema{Format: format.JSONSchema,
			Text:       `{"type":"object","properties":{"c":{"$ref":"customer.json"}}}`,
			References: map[string]string{"customer.json": `{"type":"object","required":["id"]}`}},
			`{"c":{"id":1}}`, "", []byte{0, 0, 0, 0, 7}},
		{"avro string takes the text as it is", format.Schema{Format: format.Avro, Text: `"string"`},
			`order-42`, "", []byte{0, 0, 0, 0, 7}},
		{"avro nullable string as Debezium's converter registers a payload", format.Schema{Format: format.Avro,
			Text: `["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]`},
			`{"a": [1, 2]}`, "", []byte{0, 0, 0, 0, 7, 2}},
		{"avro bytes take the bytes as they are", format.Schema{Format: format.Avro, Text: `"bytes"`},
			"\x00\xff", "", []byte{0, 0, 0, 0, 7, 4, 0, 0xff}},
		{"avro reference", format.Schema{Format: format.Avro,
			Text:       `{"type":"record","name":"Wrap","fields":[{"name":"s","type":"shop.Status"}]}`,
			References: map[string]string{"shop.Status": `{"type":"enum","name":"Status","namespace":"shop","symbols":["NEW"]}`}},
			`{"s":"NEW"}`, "", []byte{0, 0, 0, 0, 7}},
		{"protobuf first message", format.Schema{Format: format.Protobuf, Text: orderProto},
			`{"x":"y"}`, "", []byte{0, 0, 0, 0, 7, 0}},
		{"protobuf named message", format.Schema{Format: format.Protobuf, Text: orderProto, Message: "shop.Order"},
			`{"id":"5","customer":"c","items":[{"sku":"s","qty":3}]}`, "", []byte{0, 0, 0, 0, 7, 2, 2}},
		{"protobuf nested message", format.Schema{Format: format.Protobuf, Text: orderProto, Message: "shop.Order.Item"},
			`{"sku":"s","qty":3}`, "", []byte{0, 0, 0, 0, 7, 4, 2, 0}},
		{"json schema", format.Schema{Format: format.JSONSchema, Text: orderJSONSchema},
			`{"id":5,"customer":"c"}`, "", []byte{0, 0, 0, 0, 7}},
		{"json schema string", format.Schema{Format: format.JSONSchema, Text: `{"type":"string"}`},
			`order-42`, `"order-42"`, []byte{0, 0, 0, 0, 7}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := codec(t, tc.schema)
			rec, err := c.Append(nil, 7, []byte(tc.in))
			if err != nil {
				t.Fatalf("Append: %v", err)
			}
			if !strings.HasPrefix(string(rec), string(tc.header)) {
				t.Fatalf("record starts % x, want the header % x", rec[:min(len(rec), 8)], tc.header)
			}
			id, body, err := format.ID(rec)
			if err != nil || id != 7 {
				t.Fatalf("ID = %d, %v; want 7", id, err)
			}
			out, err := c.Decode(body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			want := tc.want
			if want == "" {
				want = tc.in
			}
			sameJSON(t, string(out), want)
		})
	}
}

func TestEncodeRefusesWhatDoesNotFitAndSaysWhere(t *testing.T) {
	avroOrder := format.Schema{Format: format.Avro, Text: orderAvro}
	ok := `"id":1,"customer":"b","total":5,"placed":0,"status":"NEW","items":[]`
	cases := []struct {
		name   string
		schema format.Schema
		in     string
		want   string // in the error
	}{
		{"not json", avroOrder, `{"id":`, "not JSON"},
		{"two values", avroOrder, `{} {}`, "not JSON"},
		{"bad escape", avroOrder, `{"customer":"\x"}`, "not JSON"},
		{"not utf-8", avroOrder, `{` + ok + ",\"note\":\"\xff\"}", "not UTF-8"},
		{"unknown member", avroOrder, `{` + ok + `,"extra":1}`, "$.extra: record shop.Order has no such field"},
		{"missing field", avroOrder, `{"id":1}`, "$.customer: missing, and the field has no default"},
		{"long out of range", avroOrder, `{` + strings.Replace(ok, `"id":1`, `"id":9223372036854775808`, 1) + `}`, "$.id: want an integer"},
		{"fraction in an int", avroOrder, `{` + strings.Replace(ok, `"items":[]`, `"items":[{"sku":"a","qty":1.5}]`, 1) + `}`, "$.items[0].qty: want an integer"},
		{"decimal rounded", avroOrder, `{` + strings.Replace(ok, `"total":5`, `"total":5.123`, 1) + `}`, "$.total: 5.123 has more digits after the point than the scale 2"},
		{"enum symbol", avroOrder, `{` + strings.Replace(ok, `"NEW"`, `"GONE"`, 1) + `}`, `$.status: want one of the symbols`},
		{"union branch", avroOrder, `{` + ok + `,"note":5}`, "$.note: fits no branch"},
		{"union of records fits none", format.Schema{Format: format.Avro, Text: `["null",{"type":"record","name":"A","fields":[{"name":"a","type":"int"}]}]`}, `{"b":1}`, "fits no branch"},
		{"fixed size", format.Schema{Format: format.Avro, Text: `{"type":"fixed","name":"F","size":2}`}, `"abc"`, "want 2 bytes for fixed F"},
		{"float range", format.Schema{Format: format.Avro, Text: `"float"`}, `1e39`, "out of range for a float"},
		{"sub-millisecond digits", format.Schema{Format: format.Avro, Text: `{"type":"long","logicalType":"timestamp-millis"}`}, `"2026-12-05T10:00:00.0005Z"`, "digits below the 1ms"},
		{"decimal as a fraction", avroOrder, `{` + strings.Replace(ok, `"total":5`, `"total":"1/4"`, 1) + `}`, "want a decimal number"},
		{"decimal in hex", avroOrder, `{` + strings.Replace(ok, `"total":5`, `"total":"0x10"`, 1) + `}`, "want a decimal number"},
		{"lone high surrogate", avroOrder, `{"customer":"\ud800x"}`, "surrogate"},
		{"lone low surrogate", avroOrder, `{"customer":"\udc00"}`, "surrogate"},
		{"broken pair", avroOrder, `{"customer":"\ud83d\u0041"}`, "surrogate"},
		{"record for a string", format.Schema{Format: format.Avro, Text: `{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}`}, `"x"`, "$: want an object for record R"},
		{"avro string not utf-8", format.Schema{Format: format.Avro, Text: `"string"`}, "\xff", "not UTF-8"},
		{"protobuf unknown field", format.Schema{Format: format.Protobuf, Text: orderProto, Message: "shop.Order"}, `{"nope":1}`, "does not fit message shop.Order"},
		{"protobuf wrong type", format.Schema{Format: format.Protobuf, Text: orderProto, Message: "shop.Order"}, `{"customer":5}`, "does not fit message shop.Order"},
		{"proto2 required field missing", format.Schema{Format: format.Protobuf, Text: `syntax = "proto2"; message R { required int32 a = 1; optional string b = 2; }`}, `{"b":"x"}`, "does not fit message R"},
		{"json schema extra", format.Schema{Format: format.JSONSchema, Text: orderJSONSchema}, `{"id":5,"customer":"c","x":1}`, "does not validate"},
		{"json schema type", format.Schema{Format: format.JSONSchema, Text: orderJSONSchema}, `{"id":"5","customer":"c"}`, "does not validate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := codec(t, tc.schema).Append(nil, 1, []byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Append(%s) = %v, want an error with %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestNewRefusesSchemasItCannotUse(t *testing.T) {
	cases := []struct {
		name string
		s    format.Schema
		want string
	}{
		{"bad avro", format.Schema{Format: format.Avro, Text: `{"type":"record"}`}, "parsing the avro schema"},
		{"bad proto", format.Schema{Format: format.Protobuf, Text: `message {`}, "parsing the protobuf schema"},
		{"no message", format.Schema{Format: format.Protobuf, Text: `syntax = "proto3";`}, "defines no message"},
		{"unknown message", format.Schema{Format: format.Protobuf, Text: orderProto, Message: "shop.Nope"}, "no message shop.Nope"},
		{"unresolved import", format.Schema{Format: format.Protobuf, Text: `syntax = "proto3"; import "other.proto"; message A { Other o = 1; }`}, "other.proto"},
		{"json schema fetches nothing", format.Schema{Format: format.JSONSchema, Text: `{"$ref":"https://example.com/s.json"}`}, "not a registered reference"},
		{"json", format.Schema{Format: format.JSON}, "has no schema"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := format.New(tc.s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestIDRefusesUnframedBytes(t *testing.T) {
	for _, b := range [][]byte{nil, []byte(`{"a":1}`), {0, 0, 0}} {
		if _, _, err := format.ID(b); !errors.Is(err, format.ErrNotFramed) {
			t.Errorf("ID(%q) = %v, want ErrNotFramed", b, err)
		}
	}
}

// Issue 49, item 12: a JSON Schema without $schema was compiled as draft
// 2020-12, so a draft-07 tuple (items as an array) was refused. The draft
// is the schema's $schema, and draft-07 without one, as Confluent's JSON
// Schema serializer (json.schema.spec.version) defaults to.
func TestJSONSchemaDraftFromTheSchema(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		schema    string
		fits, not string
	}{
		{name: "no $schema: draft-07 tuple items", schema: `{"type":"array","items":[{"type":"integer"},{"type":"string"}],"additionalItems":false}`,
			fits: `[1,"a"]`, not: `["a",1]`},
		{name: "draft 2020-12 prefixItems", schema: `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false}`,
			fits: `[1,"a"]`, not: `[1,"a",2]`},
		{name: "draft-04 boolean exclusiveMaximum", schema: `{"$schema":"http://json-schema.org/draft-04/schema#","type":"number","maximum":5,"exclusiveMaximum":true}`,
			fits: `4`, not: `5`},
		{name: "no $schema: draft-07 exclusiveMaximum number", schema: `{"type":"number","exclusiveMaximum":5}`,
			fits: `4`, not: `5`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := codec(t, format.Schema{Format: format.JSONSchema, Text: tt.schema})
			if _, err := c.Append(nil, 1, []byte(tt.fits)); err != nil {
				t.Errorf("%s: %v, want it to fit", tt.fits, err)
			}
			if _, err := c.Append(nil, 1, []byte(tt.not)); err == nil || !strings.Contains(err.Error(), "does not validate") {
				t.Errorf("%s: %v, want it refused", tt.not, err)
			}
		})
	}
}
