package format_test

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/format"
)

// The payload of the benchmarks' backlog (bench/cmd/outboxd-bench).
var benchPayload = []byte(`{"n": 123456, "pad": "` + strings.Repeat("x", 200) + `"}`)

func BenchmarkEncode(b *testing.B) {
	for _, s := range []format.Schema{
		{Format: format.Avro, Text: `{"type":"record","name":"Event","namespace":"benchavro","fields":[{"name":"n","type":"long"},{"name":"pad","type":"string"}]}`},
		{Format: format.Protobuf, Text: "syntax = \"proto3\";\npackage benchpb;\nmessage Event { int64 n = 1; string pad = 2; }\n"},
		{Format: format.JSONSchema, Text: `{"type":"object","properties":{"n":{"type":"integer"},"pad":{"type":"string"}},"required":["n","pad"],"additionalProperties":false}`},
	} {
		b.Run(s.Format, func(b *testing.B) {
			c, err := format.New(s)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				if buf, err = c.Append(buf[:0], 1, benchPayload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
