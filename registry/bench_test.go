package registry_test

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/registry"
)

type discard struct{}

func (discard) Apply(context.Context, outbox.Change) error     { return nil }
func (discard) Reject(context.Context, *outbox.RowError) error { return nil }

// BenchmarkApply is the stage's cost per record beside its codec's
// (format's BenchmarkEncode), the schema cached.
func BenchmarkApply(b *testing.B) {
	reg := srfake.New()
	defer reg.Close()
	reg.RegisterSchema("orders-value", sr.Schema{Schema: `{"type":"record","name":"Event","fields":[{"name":"n","type":"long"},{"name":"pad","type":"string"}]}`})
	st, err := registry.New(registry.Config{URLs: []string{reg.URL()}, Value: registry.Side{Format: format.Avro}}, discard{}, quiet())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go st.Run(ctx) //nolint:errcheck // ends with ctx
	payload := []byte(`{"n": 123456, "pad": "` + strings.Repeat("x", 200) + `"}`)
	c := outbox.Change{Kind: outbox.ChangeEvent, Event: outbox.Event{Topic: "orders", Value: payload}}
	b.ReportAllocs()
	for b.Loop() {
		if err := st.Apply(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}
