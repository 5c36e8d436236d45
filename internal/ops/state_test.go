package ops

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/cdc"
)

// supervisor says a state of its own, or "" to let the stream's stand.
type supervisor struct{ state, detail string }

func (s supervisor) Supervised() (state, detail string) { return s.state, s.detail }
func (supervisor) States() []string                     { return []string{"backing off", "stopped"} }

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

// TestStateSaysTheSupervisors: outboxd_state has a series for each state
// of the stream and of the supervisor, 1 for the current one: the
// supervisor's while it says one, else the stream's.
func TestStateSaysTheSupervisors(t *testing.T) {
	t.Parallel()
	streamOnly := map[string]float64{"starting": 0, "streaming": 0, "standby": 0, "reconnecting": 0, "stopped": 0}
	with := func(base map[string]float64, set map[string]float64) map[string]float64 {
		out := maps.Clone(base)
		maps.Copy(out, set)
		return out
	}
	supervised := with(streamOnly, map[string]float64{"backing off": 0})
	tests := []struct {
		name   string
		stream cdc.State
		sup    Supervision // nil: none
		want   map[string]float64
	}{
		{name: "no supervisor", stream: cdc.StateStandby, want: with(streamOnly, map[string]float64{"standby": 1})},
		{name: "the supervisor says nothing", stream: cdc.StateStreaming, sup: supervisor{}, want: with(supervised, map[string]float64{"streaming": 1})},
		{name: "backing off", stream: cdc.StateStopped, sup: supervisor{"backing off", "retry in 30s: slot outboxd_orders is gone"}, want: with(supervised, map[string]float64{"backing off": 1})},
		{name: "stopped, a state of both", stream: cdc.StateStreaming, sup: supervisor{state: "stopped"}, want: with(supervised, map[string]float64{"stopped": 1})},
		{name: "a state the supervisor did not list", stream: cdc.StateStreaming, sup: supervisor{state: "paused"}, want: with(supervised, map[string]float64{"paused": 1})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, reg := newMetrics(t, "orders", fixedStats{cdc.Stats{State: tt.stream}}, Counts{Supervision: tt.sup})
			if got := states(t, reg, "orders"); !maps.Equal(got, tt.want) {
				t.Errorf("outboxd_state = %v, want %v", got, tt.want)
			}
		})
	}
}
