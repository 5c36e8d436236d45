package ops

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// PipelineHealth is what /readyz and /pipelines read of one pipeline.
type PipelineHealth struct {
	Name  string
	Stats StatsSource
	// Reach, when set, says since when Kafka has been unreachable.
	Reach KafkaReach
	// Supervision, when set, is the supervisor's word on the pipeline: its
	// state while it says one (waiting, backing off).
	Supervision Supervision
}

// ready answers whether the process serves: 200 once it runs its
// pipelines, each streaming, standing by or being retried by its
// supervisor; 503 before it lists any and once it is stopping
// (Server.Stopping). What one pipeline does never changes the answer: a
// standby's slot retries, a pipeline backing off after a poison row, a
// database that refuses its password or a Kafka out of reach are that
// pipeline's trouble, and show in outboxd_state, the alerts and
// /pipelines, not in the readiness of every replica (a rolling update
// waits for each pod to be ready).
//
// The body says why, and how many pipelines are in each state: "ready: 3
// pipelines (2 standby, 1 streaming)", "not ready: stopping". It holds
// no error text (which can carry a row's values): /pipelines has the
// detail.
func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	list := s.pipelines()
	switch {
	case s.stopping():
		http.Error(w, "not ready: stopping"+summary(list), http.StatusServiceUnavailable)
	case len(list) == 0:
		http.Error(w, "not ready: no pipeline", http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ready"+summary(list))
	}
}

// stopping reports whether the process is stopping.
func (s *Server) stopping() bool {
	if s.Stopping == nil {
		return false
	}
	select {
	case <-s.Stopping:
		return true
	default:
		return false
	}
}

// summary counts the pipelines of list by state: ": 3 pipelines (2
// standby, 1 streaming)", ": 1 pipeline (standby)", "" for none.
func summary(list []PipelineHealth) string {
	if len(list) == 0 {
		return ""
	}
	counts := map[string]int{}
	for _, p := range list {
		state, _, _ := stateOf(p.Stats.Stats(), p.Supervision)
		counts[state]++
	}
	if len(list) == 1 {
		state, _, _ := stateOf(list[0].Stats.Stats(), list[0].Supervision)
		return ": 1 pipeline (" + state + ")"
	}
	var parts []string
	for _, state := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, strconv.Itoa(counts[state])+" "+state)
	}
	return ": " + strconv.Itoa(len(list)) + " pipelines (" + strings.Join(parts, ", ") + ")"
}
