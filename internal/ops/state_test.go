package ops

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/pipeline"
)

// states returns pipeline's outboxd_state series by state label.
func states(t *testing.T, reg prometheus.Gatherer, pipeline string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "outboxd_state" {
			continue
		}
		for _, s := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pipeline"] == pipeline {
				got[labels["state"]] = s.GetGauge().GetValue()
			}
		}
	}
	return got
}

// TestStateSeriesCoverEveryState: outboxd_state has a series for each
// state it is told of (a pipeline's, and a supervisor's), 1 for the
// current one, and one for a current state it was not told of.
func TestStateSeriesCoverEveryState(t *testing.T) {
	t.Parallel()
	own := map[string]float64{"starting": 0, "streaming": 0, "standby": 0, "reconnecting": 0, "stopped": 0, "paused": 0}
	with := func(base map[string]float64, set map[string]float64) map[string]float64 {
		out := maps.Clone(base)
		maps.Copy(out, set)
		return out
	}
	supervised := with(own, map[string]float64{"backing off": 0, "waiting": 0})
	all := append(pipeline.States(), "backing off", "waiting")
	tests := []struct {
		name   string
		state  pipeline.State
		states []pipeline.State
		want   map[string]float64
	}{
		{name: "a pipeline's states", state: pipeline.StateStandby, states: pipeline.States(), want: with(own, map[string]float64{"standby": 1})},
		{name: "streaming, under a supervisor", state: pipeline.StateStreaming, states: all, want: with(supervised, map[string]float64{"streaming": 1})},
		{name: "backing off", state: "backing off", states: all, want: with(supervised, map[string]float64{"backing off": 1})},
		{name: "a state nobody listed", state: "draining", states: all, want: with(supervised, map[string]float64{"draining": 1})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, reg := newMetrics(t, "orders", fixed{pipeline.Status{State: tt.state}}, tt.states...)
			if got := states(t, reg, "orders"); !maps.Equal(got, tt.want) {
				t.Errorf("outboxd_state = %v, want %v", got, tt.want)
			}
		})
	}
}
