package ops

import (
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/pump"
)

// sample returns the value of pipeline's sample of name whose other
// labels are labels (name, value, ...), or -1. Pipeline "" is the
// process's, unlabelled.
func sample(t *testing.T, reg prometheus.Gatherer, pipeline, name string, labels ...string) float64 {
	t.Helper()
	want := map[string]string{}
	if pipeline != "" {
		want["pipeline"] = pipeline
	}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range s.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if !maps.Equal(got, want) {
				continue
			}
			if c := s.GetCounter(); c != nil {
				return c.GetValue()
			}
			return s.GetGauge().GetValue()
		}
	}
	return -1
}

// TestKafkaUnreachableShows is issue 37, item 19 on the metrics' side: a
// wrong broker looked healthy: connection errors 0, replication lag 0
// while records waited, /readyz without a word of how long. The failed
// Kafka dials count as connection errors beside the lost replication
// sessions, the lag is the age of the oldest record in flight, and
// /pipelines says since when Kafka is unreachable (readiness is the
// process's, issue 49).
func TestKafkaUnreachableShows(t *testing.T) {
	t.Parallel()
	now := time.Now()
	reach := pipeline.KafkaStatus{ConnectionErrors: 3, UnreachableSince: now.Add(-10 * time.Second)}
	st := pipeline.Status{State: pipeline.StateStreaming, Stream: cdc.Stats{Reconnects: 2},
		Window: pump.Stats{InFlightRecords: 1, OldestInFlightCommit: now.Add(-time.Minute)}, Kafka: reach}
	_, reg := newMetrics(t, "orders", fixed{st})
	if got := sample(t, reg, "orders", "outboxd_errors_total", "kind", "connection"); got != 5 {
		t.Errorf(`outboxd_errors_total{kind="connection"} = %v, want 5 (2 replication sessions lost, 3 Kafka dials failed)`, got)
	}
	if got := sample(t, reg, "orders", "outboxd_kafka_unreachable_seconds"); got < 10 {
		t.Errorf("outboxd_kafka_unreachable_seconds = %v, want at least 10", got)
	}
	if got := sample(t, reg, "orders", "outboxd_replication_lag_seconds"); got < 60 {
		t.Errorf("outboxd_replication_lag_seconds = %v with a record committed a minute ago in flight, want at least 60", got)
	}
	reachable := st
	reachable.Kafka = pipeline.KafkaStatus{}
	_, bare := newMetrics(t, "orders", fixed{reachable})
	if got := sample(t, bare, "orders", "outboxd_kafka_unreachable_seconds"); got != 0 {
		t.Errorf("outboxd_kafka_unreachable_seconds while Kafka answers = %v, want 0", got)
	}

	srv := &Server{Registry: reg, Pipelines: list(Named{Name: "orders", Status: st}), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rec := httptest.NewRecorder()
	srv.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/pipelines", nil))
	want := `"kafka_unreachable_since": "` + reach.UnreachableSince.UTC().Format(time.RFC3339Nano) + `"`
	if body := rec.Body.String(); rec.Code != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("/pipelines = %d %q, want 200 with %s", rec.Code, body, want)
	}
}
