package ops

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/pipeline"
)

// Named is one pipeline's status as /readyz and /pipelines read it, under
// its name.
type Named struct {
	Name   string
	Status pipeline.Status
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
func summary(list []Named) string {
	if len(list) == 0 {
		return ""
	}
	if len(list) == 1 {
		return ": 1 pipeline (" + string(list[0].Status.State) + ")"
	}
	counts := map[pipeline.State]int{}
	for _, p := range list {
		counts[p.Status.State]++
	}
	var parts []string
	for _, state := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, strconv.Itoa(counts[state])+" "+string(state))
	}
	return ": " + strconv.Itoa(len(list)) + " pipelines (" + strings.Join(parts, ", ") + ")"
}
