package format_test

import (
	"testing"

	"github.com/outboxd/outboxd/format"
)

// FuzzCodecs: no payload makes a codec panic or encode something its
// own decoder cannot read back, and no record bytes make a decoder panic
// (a consumer decodes what it is handed).
func FuzzCodecs(f *testing.F) {
	schemas := []format.Schema{
		{Format: format.Avro, Text: orderAvro},
		{Format: format.Avro, Text: `["null",{"type":"map","values":["long","string",{"type":"array","items":"double"}]}]`},
		{Format: format.Protobuf, Text: orderProto, Message: "shop.Order"},
		{Format: format.JSONSchema, Text: orderJSONSchema},
	}
	codecs := make([]*format.Codec, len(schemas))
	for i, s := range schemas {
		c, err := format.New(s)
		if err != nil {
			f.Fatal(err)
		}
		codecs[i] = c
	}
	for _, seed := range []string{`{"id":1,"customer":"b","total":5,"placed":0,"status":"NEW","items":[{"sku":"a","qty":2}]}`,
		`{"k":[1.5,2],"j":3,"s":"x"}`, `{"id":"5","customer":"c","items":[{"sku":"s","qty":3}]}`, `null`, `{"a":"\u00ff"}`, "\x00\x01\x02"} {
		f.Add(uint8(0), []byte(seed))
	}
	f.Fuzz(func(t *testing.T, which uint8, in []byte) {
		c := codecs[int(which)%len(codecs)]
		if rec, err := c.Append(nil, 1, in); err == nil {
			_, body, err := format.ID(rec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Decode(body); err != nil {
				t.Fatalf("%s: encoded %q, cannot decode it: %v", c.Format(), in, err)
			}
		}
		_, _ = c.Decode(in) // garbage bytes: an error, never a panic
	})
}
