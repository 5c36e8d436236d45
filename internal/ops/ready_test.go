package ops

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outboxd/outboxd/cdc"
)

// list is a Server.Pipelines that lists ps.
func list(ps ...PipelineHealth) func() []PipelineHealth {
	return func() []PipelineHealth { return ps }
}

// countingPinger answers err and counts the pings.
type countingPinger struct {
	err   error
	pings atomic.Int32
}

func (p *countingPinger) Ping(context.Context) error { p.pings.Add(1); return p.err }

// get serves one GET of path from srv.
func get(t *testing.T, srv *Server, path string) (code int, body string) {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.routes().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
	return rec.Code, strings.TrimSuffix(rec.Body.String(), "\n")
}

func newServer(pipelines ...PipelineHealth) *Server {
	return &Server{Registry: NewRegistry(), Pipelines: list(pipelines...), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestReadyz: one pipeline answers as before issue 39 ("ready", "not
// ready: STATE"); several answer 200 only when all are ready, a line each,
// sorted by name; a supervisor's state makes its pipeline not ready.
func TestReadyz(t *testing.T) {
	t.Parallel()
	streaming := fixedStats{cdc.Stats{State: cdc.StateStreaming}}
	up := &countingPinger{}
	ready := func(name string) PipelineHealth { return PipelineHealth{Name: name, Stats: streaming, Kafka: up} }
	tests := []struct {
		name      string
		pipelines []PipelineHealth
		wantCode  int
		wantBody  string
	}{
		{name: "one streaming, Kafka answers", pipelines: []PipelineHealth{ready("orders")}, wantCode: 200, wantBody: "ready"},
		{name: "one standing by", pipelines: []PipelineHealth{{Name: "orders", Stats: fixedStats{cdc.Stats{State: cdc.StateStandby}}, Kafka: up}},
			wantCode: 503, wantBody: "not ready: standby"},
		{name: "one streaming, Kafka down", pipelines: []PipelineHealth{{Name: "orders", Stats: streaming, Kafka: downPinger{}}},
			wantCode: 503, wantBody: "not ready: streaming, Kafka unreachable: reaching Kafka: connection refused"},
		{name: "none", wantCode: 503, wantBody: "not ready: no pipeline"},
		{name: "several, all ready", pipelines: []PipelineHealth{ready("payments"), ready("orders")},
			wantCode: 200, wantBody: "orders: ready\npayments: ready"},
		{name: "several, one reconnecting", pipelines: []PipelineHealth{ready("payments"), {Name: "orders", Stats: fixedStats{cdc.Stats{State: cdc.StateReconnecting}}, Kafka: up}},
			wantCode: 503, wantBody: "orders: not ready: reconnecting\npayments: ready"},
		{name: "several, one's Kafka down", pipelines: []PipelineHealth{ready("orders"), {Name: "payments", Stats: streaming, Kafka: downPinger{}}},
			wantCode: 503, wantBody: "orders: ready\npayments: not ready: streaming, Kafka unreachable: reaching Kafka: connection refused"},
		{name: "several, one backing off", pipelines: []PipelineHealth{ready("payments"),
			{Name: "orders", Stats: fixedStats{cdc.Stats{State: cdc.StateStopped}}, Kafka: up, Supervision: supervisor{"backing off", "retry in 30s: slot outboxd_orders is gone"}}},
			wantCode: 503, wantBody: "orders: not ready: backing off: retry in 30s: slot outboxd_orders is gone\npayments: ready"},
		{name: "one stopped by its supervisor while streaming", pipelines: []PipelineHealth{{Name: "orders", Stats: streaming, Kafka: up, Supervision: supervisor{state: "stopped"}}},
			wantCode: 503, wantBody: "not ready: stopped"},
		{name: "one whose supervisor's state is named like the stream's", pipelines: []PipelineHealth{{Name: "orders", Stats: streaming, Kafka: up, Supervision: supervisor{state: "streaming"}}},
			wantCode: 503, wantBody: "not ready: streaming"},
		{name: "one whose supervisor says nothing", pipelines: []PipelineHealth{{Name: "orders", Stats: streaming, Kafka: up, Supervision: supervisor{}}},
			wantCode: 200, wantBody: "ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if code, body := get(t, newServer(tt.pipelines...), "/readyz"); code != tt.wantCode || body != tt.wantBody {
				t.Errorf("readyz = %d %q, want %d %q", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

// TestKafkaCheckPerPipeline: each pipeline's Kafka check is rate-limited
// on its own: one pipeline's answer is never another's, and a second
// /readyz within kafkaCheckEvery pings none again. A pipeline no longer
// listed is forgotten.
func TestKafkaCheckPerPipeline(t *testing.T) {
	t.Parallel()
	streaming := fixedStats{cdc.Stats{State: cdc.StateStreaming}}
	up, down := &countingPinger{}, &countingPinger{err: downPinger{}.Ping(t.Context())}
	orders := PipelineHealth{Name: "orders", Stats: streaming, Kafka: up}
	payments := PipelineHealth{Name: "payments", Stats: streaming, Kafka: down}
	srv := newServer(orders, payments)
	want := "orders: ready\npayments: not ready: streaming, Kafka unreachable: reaching Kafka: connection refused"
	for i := range 2 {
		if code, body := get(t, srv, "/readyz"); code != 503 || body != want {
			t.Errorf("readyz #%d = %d %q, want 503 %q", i+1, code, body, want)
		}
	}
	if u, d := up.pings.Load(), down.pings.Load(); u != 1 || d != 1 {
		t.Errorf("two /readyz within %v pinged orders' Kafka %d times and payments' %d times, want once each", kafkaCheckEvery, u, d)
	}
	srv.Pipelines = list(payments)
	get(t, srv, "/readyz")
	if names := slices.Sorted(maps.Keys(srv.checks)); !slices.Equal(names, []string{"payments"}) {
		t.Errorf("Kafka checks kept for %v, want payments alone", names)
	}
}
