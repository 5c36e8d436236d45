package pipeline

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/pump"
)

// TestStatesAreTheStreams: a running pipeline's State is its stream's
// state's text, so each of States must be one of cdc.State's, but for a
// paused pipeline's, which runs no stream.
func TestStatesAreTheStreams(t *testing.T) {
	t.Parallel()
	stream := []cdc.State{cdc.StateStarting, cdc.StateStreaming, cdc.StateStandby, cdc.StateReconnecting, cdc.StateStopped}
	if len(States()) != len(stream)+1 || States()[len(stream)] != StatePaused {
		t.Fatalf("States() = %v, want one for each of the stream's %v, then paused", States(), stream)
	}
	for i, s := range stream {
		if got := States()[i]; string(got) != s.String() {
			t.Errorf("States()[%d] = %q, want the stream's %q", i, got, s)
		}
	}
}

// TestLagSeconds pins outboxd_replication_lag_seconds' meaning.
func TestLagSeconds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		s    pump.Stats
		want float64
	}{
		{"nothing in flight", pump.Stats{NewestAckedCommit: now.Add(-time.Hour)}, 0},
		{"a record waiting, none acknowledged ever", pump.Stats{InFlightRecords: 1, OldestInFlightCommit: now.Add(-3 * time.Minute)}, 180},
		{"the oldest in flight, not the newest acknowledged", pump.Stats{InFlightRecords: 2, OldestInFlightCommit: now.Add(-2 * time.Second), NewestAckedCommit: now.Add(-time.Hour)}, 2},
		{"the oldest in flight has no commit time", pump.Stats{InFlightRecords: 1, NewestAckedCommit: now.Add(-4 * time.Second)}, 4},
		{"neither known", pump.Stats{InFlightRecords: 1}, 0},
		{"a commit time ahead of this clock", pump.Stats{InFlightRecords: 1, OldestInFlightCommit: now.Add(time.Second)}, 0},
	} {
		if got := (Status{Window: tc.s}).LagSeconds(now); got != tc.want {
			t.Errorf("%s: LagSeconds = %v, want %v", tc.name, got, tc.want)
		}
	}
}
