package ops

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/pump"
)

// list is a Server.Pipelines that lists ps.
func list(ps ...Named) func() []Named {
	return func() []Named { return ps }
}

// get serves one GET of path from srv.
func get(t *testing.T, srv *Server, path string) (code int, body string) {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.routes().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
	return rec.Code, strings.TrimSuffix(rec.Body.String(), "\n")
}

func newServer(pipelines ...Named) *Server {
	return &Server{Registry: NewRegistry(), Pipelines: list(pipelines...), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestReadyz is issue 49, items 1 and 17: /readyz answered 503 while
// any pipeline was not streaming with Kafka reachable, so a standby's slot
// retries (starting, 20-30 ms each) made it flap, and one pipeline backing
// off, one database refusing its password or Kafka out of reach made every
// replica not ready, which stalls a StatefulSet's rolling update. It now
// answers whether the process serves: 200 whatever its pipelines do, 503
// with no pipeline and once the process stops; the body counts the states
// and carries no error text.
func TestReadyz(t *testing.T) {
	t.Parallel()
	in := func(name string, state pipeline.State) Named {
		return Named{Name: name, Status: pipeline.Status{State: state}}
	}
	backingOff := Named{Name: "refunds", Status: pipeline.Status{State: "backing off",
		Detail: "decoding insert into public.outbox: column \"payload\": secret-value (outbox id 7)"}}
	stopped := make(chan struct{})
	close(stopped)
	tests := []struct {
		name      string
		pipelines []Named
		stopping  <-chan struct{}
		wantCode  int
		wantBody  string
	}{
		{name: "one streaming", pipelines: []Named{in("orders", pipeline.StateStreaming)}, wantCode: 200, wantBody: "ready: 1 pipeline (streaming)"},
		{name: "one standing by", pipelines: []Named{in("orders", pipeline.StateStandby)}, wantCode: 200, wantBody: "ready: 1 pipeline (standby)"},
		{name: "a standby's slot retry passes through starting", pipelines: []Named{in("orders", pipeline.StateStarting)}, wantCode: 200,
			wantBody: "ready: 1 pipeline (starting)"},
		{name: "one reconnecting", pipelines: []Named{in("orders", pipeline.StateReconnecting)}, wantCode: 200, wantBody: "ready: 1 pipeline (reconnecting)"},
		{name: "none", wantCode: 503, wantBody: "not ready: no pipeline"},
		{name: "several, one backing off after a poison row", pipelines: []Named{in("payments", pipeline.StateStreaming), in("orders", pipeline.StateStandby), backingOff},
			wantCode: 200, wantBody: "ready: 3 pipelines (1 backing off, 1 standby, 1 streaming)"},
		{name: "waiting for its rank", pipelines: []Named{{Name: "orders", Status: pipeline.Status{State: "waiting"}}},
			wantCode: 200, wantBody: "ready: 1 pipeline (waiting)"},
		{name: "stopping", pipelines: []Named{in("orders", pipeline.StateStreaming)}, stopping: stopped, wantCode: 503,
			wantBody: "not ready: stopping: 1 pipeline (streaming)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(tt.pipelines...)
			srv.Stopping = tt.stopping
			if code, body := get(t, srv, "/readyz"); code != tt.wantCode || body != tt.wantBody {
				t.Errorf("readyz = %d %q, want %d %q", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

// TestPipelinesEndpoint: GET /pipelines lists every pipeline, sorted by
// name, with its state (the supervisor's when it says one), confirmed
// position, lag and records in flight; /healthz stays
// "ok" whatever the pipelines are.
func TestPipelinesEndpoint(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	srv := newServer(
		Named{Name: "payments", Status: pipeline.Status{State: pipeline.StateStreaming, Kafka: pipeline.KafkaStatus{ConnectionErrors: 3, UnreachableSince: since},
			Stream: cdc.Stats{ConfirmedLSN: outbox.LSN(0x16B3748), ServerWALEnd: outbox.LSN(0x16B3748 + 100)}, Window: pump.Stats{InFlightRecords: 2}}},
		Named{Name: "orders", Status: pipeline.Status{State: "backing off", Detail: "retry in 30s: slot outboxd_orders is gone"}},
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

	empty := newServer()
	if code, body := get(t, empty, "/pipelines"); code != 200 || body != `{`+"\n"+`  "pipelines": []`+"\n"+`}` {
		t.Errorf("GET /pipelines without pipelines = %d %q, want 200 and an empty list", code, body)
	}
	if code, body := get(t, empty, "/healthz"); code != 200 || body != "ok" {
		t.Errorf("healthz without pipelines = %d %q, want 200 ok", code, body)
	}
}
