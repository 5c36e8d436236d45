package ops

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/cdc"
)

// Supervision is what a supervisor running a pipeline says of it beyond
// the stream's own state: backing off after a failure, stopped.
type Supervision interface {
	// Supervised returns the pipeline's state as the supervisor sees it
	// ("backing off") and a detail for /readyz and /pipelines ("retry in
	// 30s: slot outboxd_orders is gone"), or state "" while the stream's
	// own state stands.
	Supervised() (state, detail string)
	// States lists the states Supervised returns, so that outboxd_state
	// has a series for each (0 while it is not the current one).
	States() []string
}

// stateOf is a pipeline's state: the supervisor's when it says one
// (supervised), else the stream's in s (detail "").
func stateOf(s cdc.Stats, sup Supervision) (state, detail string, supervised bool) {
	if sup != nil {
		if state, detail := sup.Supervised(); state != "" {
			return state, detail, true
		}
	}
	return s.State.String(), "", false
}

var stateDesc = prometheus.NewDesc("outboxd_state", "1 for the current state of the pipeline, 0 for the others: the replication side's "+
	"(starting, streaming (active), standby, reconnecting, stopped) or, for a pipeline a supervisor runs, the supervisor's when it says one "+
	"(such as backing off after a failure). Kafka's side is outboxd_kafka_unreachable_seconds: streaming with it above 0 means reading the slot "+
	"while records wait for Kafka.", []string{"state"}, nil)

// stateCollector exports outboxd_state from the pipeline's state at
// scrape time: a series for each state of the stream and of the
// supervisor (sup, nil without one).
type stateCollector struct {
	src StatsSource
	sup Supervision
}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- stateDesc }
func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	cur, _, _ := stateOf(c.src.Stats(), c.sup)
	var states []string
	for _, s := range []cdc.State{cdc.StateStarting, cdc.StateStreaming, cdc.StateStandby, cdc.StateReconnecting, cdc.StateStopped} {
		states = append(states, s.String())
	}
	if c.sup != nil {
		states = append(states, c.sup.States()...)
	}
	states = append(states, cur) // the current state has its series, listed or not
	slices.Sort(states)
	for _, s := range slices.Compact(states) {
		v := 0.0
		if s == cur {
			v = 1
		}
		m, err := prometheus.NewConstMetric(stateDesc, prometheus.GaugeValue, v, s)
		if err != nil { // a supervisor's state that is no label value (invalid UTF-8)
			m = prometheus.NewInvalidMetric(stateDesc, err)
		}
		ch <- m
	}
}
