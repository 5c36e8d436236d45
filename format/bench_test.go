package format_test

import (
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

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

// BenchmarkProtobufFloor is what the prescribed libraries alone cost for
// the benchmarks' payload, without outboxd's code around them: protojson
// reading the JSON into a dynamicpb message of the registered descriptor,
// and proto writing it. Run with -cpu 1, as outboxd runs, it includes
// their garbage collection: the floor under --value-format protobuf's
// CPU per event.
func BenchmarkProtobufFloor(b *testing.B) {
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(map[string]string{
		"bench.proto": "syntax = \"proto3\";\npackage benchpb;\nmessage Event { int64 n = 1; string pad = 2; }\n"})}}
	files, err := c.Compile(b.Context(), "bench.proto")
	if err != nil {
		b.Fatal(err)
	}
	md := files[0].Messages().Get(0)
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		m := dynamicpb.NewMessage(md)
		if err := (protojson.UnmarshalOptions{AllowPartial: true}).Unmarshal(benchPayload, m); err != nil {
			b.Fatal(err)
		}
		if buf, err = (proto.MarshalOptions{Deterministic: true, AllowPartial: true}).MarshalAppend(buf[:0], m); err != nil {
			b.Fatal(err)
		}
	}
}
