package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/outboxd/outboxd/harness/testbed"
)

// formatSystems are outboxd with a schema format for the records' values
// (--value-format): the payload encoded per a schema registered in a
// schema registry (Apicurio Registry from the test bed) under the record
// name strategy, so one registration serves every topic of the run.
var formatSystems = []string{"outboxd-avro", "outboxd-protobuf", "outboxd-json-schema"}

// benchSchemas are the schemas of the backlog's payload ({"n": N, "pad":
// 200 x}, payloadSQL) and the steady rates' ({"pad": 200 x}, without n),
// by format: the record name, its type and its text.
var benchSchemas = map[string]struct {
	record string
	typ    sr.SchemaType
	text   string
}{
	"avro": {"benchavro.Event", sr.TypeAvro,
		`{"type":"record","name":"Event","namespace":"benchavro","fields":[{"name":"n","type":"long","default":0},{"name":"pad","type":"string"}]}`},
	"protobuf": {"benchpb.Event", sr.TypeProtobuf,
		"syntax = \"proto3\";\npackage benchpb;\nmessage Event { int64 n = 1; string pad = 2; }\n"},
	"json-schema": {"bench-json-schema", sr.TypeJSON,
		`{"title":"bench-json-schema","type":"object","properties":{"n":{"type":"integer"},"pad":{"type":"string"}},"required":["pad"],"additionalProperties":false}`},
}

// startRegistry starts a schema registry and registers benchSchemas when
// a format system is measured; the returned func stops it.
func (e *env) startRegistry(ctx context.Context, systems []string) (func(), error) {
	if !slices.ContainsFunc(systems, func(s string) bool { return slices.Contains(formatSystems, s) }) {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "outboxd-registry-")
	if err != nil {
		return nil, err
	}
	reg, err := testbed.StartRegistry(context.WithoutCancel(ctx), e.o.testbed, dir)
	stop := func() {
		if reg != nil {
			_ = reg.Stop(context.WithoutCancel(ctx))
		}
		_ = os.RemoveAll(dir)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("starting the schema registry: %w", err)
	}
	cl, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		stop()
		return nil, err
	}
	for _, s := range benchSchemas {
		if _, err := cl.CreateSchema(ctx, s.record, sr.Schema{Schema: s.text, Type: s.typ}); err != nil {
			stop()
			return nil, fmt.Errorf("registering %s: %w", s.record, err)
		}
	}
	e.registryURL = reg.URL
	return stop, nil
}

// formatArgs are the flags of a format system.
func (e *env) formatArgs(sys string) []string {
	f := strings.TrimPrefix(sys, "outboxd-")
	return []string{"--value-format", f, "--schema-registry-url", e.registryURL,
		"--subject-name-strategy", "record", "--value-schema-record", benchSchemas[f].record}
}
