package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/publish"
)

// A paused pipeline (issue 53) reads nothing and says so: its state is
// paused, since when it is, and a stop returns at once. No server is
// needed: it connects to none but the WAL check's, which it retries.
func TestAPausedPipelineStandsPaused(t *testing.T) {
	t.Parallel()
	cfg := pipeline.Config{
		Stream: cdc.Config{DatabaseURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", Slot: "paused"},
		Kafka:  publish.Config{Brokers: []string{"127.0.0.1:1"}},
		Paused: true,
	}
	p, err := pipeline.New(cfg, discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	before := time.Now()
	go func() { done <- p.Run(ctx) }()
	testenv.Eventually(t, time.Minute, "paused", func() bool { return !p.Status().PausedSince.IsZero() })
	st := p.Status()
	if st.State != pipeline.StatePaused || st.PausedSince.Before(before.Add(-time.Second)) || !strings.HasPrefix(st.Detail, "paused since ") {
		t.Errorf("status %+v: want paused, since it started, said in Detail", st)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run of a paused pipeline stopped = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run of a paused pipeline did not return after its stop")
	}
}
