package ops

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/pump"
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
		{name: "replicated: standing by is ready", pipelines: []PipelineHealth{ready("orders"),
			{Name: "payments", Stats: fixedStats{cdc.Stats{State: cdc.StateStandby}}, Kafka: up, Replicated: true},
			{Name: "refunds", Stats: fixedStats{cdc.Stats{State: cdc.StateStopped}}, Kafka: up, Supervision: supervisor{Waiting, "rank 1"}, Replicated: true}},
			wantCode: 200, wantBody: "orders: ready\npayments: ready\nrefunds: ready"},
		{name: "replicated: backing off is not ready", pipelines: []PipelineHealth{
			{Name: "orders", Stats: fixedStats{cdc.Stats{State: cdc.StateStopped}}, Kafka: up, Supervision: supervisor{"backing off", "slot gone"}, Replicated: true}},
			wantCode: 503, wantBody: "not ready: backing off: slot gone"},
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

// TestPipelinesEndpoint: GET /pipelines lists every pipeline, sorted by
// name, with its state (the supervisor's when it says one), confirmed
// position, lag and records in flight, and pings nothing; /healthz stays
// "ok" whatever the pipelines are.
func TestPipelinesEndpoint(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	kafka := &countingPinger{}
	srv := newServer(
		PipelineHealth{Name: "payments", Kafka: kafka, Reach: fakeReach{errs: 3, since: since},
			Stats: fixedStats{cdc.Stats{State: cdc.StateStreaming, ConfirmedLSN: outbox.LSN(0x16B3748), ServerWALEnd: outbox.LSN(0x16B3748 + 100),
				Stats: pump.Stats{InFlightRecords: 2}}}},
		PipelineHealth{Name: "orders", Kafka: kafka, Stats: fixedStats{cdc.Stats{State: cdc.StateStopped}},
			Supervision: supervisor{"backing off", "retry in 30s: slot outboxd_orders is gone"}},
	)
	code, body := get(t, srv, "/pipelines")
	if code != 200 {
		t.Fatalf("GET /pipelines = %d %q", code, body)
	}
	var got Status
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("GET /pipelines: %v in %q", err, body)
	}
	want := Status{Pipelines: []PipelineStatus{
		{Name: "orders", State: "backing off", Detail: "retry in 30s: slot outboxd_orders is gone", ConfirmedLSN: "0/0"},
		{Name: "payments", State: "streaming", ConfirmedLSN: "0/16B3748", LagBytes: 100, InFlightRecords: 2, KafkaUnreachableSince: &since},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET /pipelines = %s, want %+v", body, want)
	}
	if n := kafka.pings.Load(); n != 0 {
		t.Errorf("GET /pipelines pinged Kafka %d times, want none", n)
	}

	empty := newServer()
	if code, body := get(t, empty, "/pipelines"); code != 200 || body != `{`+"\n"+`  "pipelines": []`+"\n"+`}` {
		t.Errorf("GET /pipelines without pipelines = %d %q, want 200 and an empty list", code, body)
	}
	if code, body := get(t, empty, "/healthz"); code != 200 || body != "ok" {
		t.Errorf("healthz without pipelines = %d %q, want 200 ok", code, body)
	}
}
