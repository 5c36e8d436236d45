package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/harness/testenv"
)

// TestASingleFleetStopsOnItsPipelinesFailure: `run` without a pipelines
// file is a fleet of one (issue 50: one run path), and must still stop
// with its pipeline's error, as it did, for whatever supervises the
// process to restart it and to say a refused configuration once, where
// a fleet of a file starts a failed pipeline again after a backoff.
func TestASingleFleetStopsOnItsPipelinesFailure(t *testing.T) {
	t.Parallel()
	// A pipeline that fails at once: its delivery mode does not exist.
	bad := spec("orders", "postgres://127.0.0.1:1/none", "orders", []string{"127.0.0.1:1"})
	bad.Config.Delivery = "twice"
	tests := []struct {
		name   string
		single bool
	}{
		{name: "single: Run returns the failure", single: true},
		{name: "a file's fleet: the pipeline backs off, Run goes on", single: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := fleet.New(fleet.Config{Single: tt.single, RetryInitial: time.Hour, RetryMax: time.Hour}, []fleet.Spec{bad}, fleet.Hooks{}, discard())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- f.Run(ctx) }()
			testenv.Eventually(t, time.Minute, "the pipeline failed", func() bool { return f.Members()[0].Status().PermanentErrors == 1 })
			if !tt.single {
				select {
				case err := <-done:
					t.Fatalf("Run = %v after one pipeline failed, want it running", err)
				default:
				}
				cancel()
			}
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Run did not return")
			}
			switch {
			case tt.single && (err == nil || !strings.Contains(err.Error(), "twice")):
				t.Errorf("Run = %v, want the pipeline's failure naming its delivery mode", err)
			case !tt.single && err != nil:
				t.Errorf("Run = %v, want nil once ctx ended: a pipeline's failure never ends a file's fleet", err)
			}
		})
	}
}
