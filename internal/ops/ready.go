package ops

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/cdc"
)

// Pinger checks that Kafka answers.
type Pinger interface {
	Ping(ctx context.Context) error
}

// PipelineHealth is what /readyz and /pipelines read of one pipeline.
type PipelineHealth struct {
	Name  string
	Stats StatsSource
	Kafka Pinger
	// Reach, when set, says since when Kafka has been unreachable.
	Reach KafkaReach
	// Supervision, when set, is the supervisor's word on the pipeline:
	// while it says a state, that state is the pipeline's, not ready.
	Supervision Supervision
	// Replicated: other replicas run the pipeline too, and the slot admits
	// one of them. Standing by while another holds it (standby, or a
	// supervisor's Waiting) is then this replica's normal part: ready.
	Replicated bool
}

// Waiting is the supervisor state that a Replicated pipeline's /readyz
// takes for a standby's (fleet.StateWaiting: its rank's delay).
const Waiting = "waiting"

// kafkaCheckEvery rate-limits each pipeline's Kafka reachability check of
// /readyz.
const kafkaCheckEvery = 2 * time.Second

// kafkaCheck is one pipeline's rate-limited Kafka reachability check.
type kafkaCheck struct {
	mu      sync.Mutex
	checked time.Time
	err     error
}

// ping returns k's last answer when younger than kafkaCheckEvery, else
// pings anew.
func (k *kafkaCheck) ping(ctx context.Context, kafka Pinger) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.checked) < kafkaCheckEvery {
		return k.err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	k.err = kafka.Ping(pctx)
	k.checked = time.Now()
	return k.err
}

// kafkaChecks returns the Kafka check of each pipeline of list, in its
// order, and forgets those of pipelines no longer listed. A pipeline
// added again under the same name within kafkaCheckEvery of its last
// check gets that check's answer.
func (s *Server) kafkaChecks(list []PipelineHealth) []*kafkaCheck {
	s.mu.Lock()
	defer s.mu.Unlock()
	checks := make(map[string]*kafkaCheck, len(list))
	out := make([]*kafkaCheck, len(list))
	for i, p := range list {
		k := s.checks[p.Name]
		if k == nil {
			k = &kafkaCheck{}
		}
		checks[p.Name], out[i] = k, k
	}
	s.checks = checks
	return out
}

// ready answers 200 when every pipeline is ready, 503 otherwise, and none
// listed is not ready. A pipeline is ready while streaming with Kafka
// reachable (a standby waiting for the slot is alive but not ready), and
// while its supervisor says no state of its own. Streaming with Kafka
// unreachable reads "not ready: streaming, Kafka unreachable since TIME
// (N failed Kafka dials and requests): ERROR": the slot is read, and the
// records wait for Kafka; a supervisor's state "not ready: STATE: DETAIL".
//
// With one pipeline the body is its answer: "ready" or "not ready: ...".
// With several it is a line per pipeline, "NAME: ready" or "NAME: not
// ready: ...", sorted by name.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	list := s.pipelines()
	if len(list) == 0 {
		http.Error(w, "not ready: no pipeline", http.StatusServiceUnavailable)
		return
	}
	checks := s.kafkaChecks(list)
	lines := make([]string, len(list))
	ready := make([]bool, len(list))
	var wg sync.WaitGroup
	for i, p := range list {
		wg.Go(func() {
			reason := p.notReady(r.Context(), checks[i])
			ready[i] = reason == ""
			lines[i] = "ready"
			if !ready[i] {
				lines[i] = "not ready: " + reason
			}
			if len(list) > 1 {
				lines[i] = p.Name + ": " + lines[i]
			}
		})
	}
	wg.Wait()
	body := strings.Join(lines, "\n")
	for _, ok := range ready {
		if !ok {
			http.Error(w, body, http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintln(w, body)
}

// notReady says why p is not ready, or "" when it is.
func (p PipelineHealth) notReady(ctx context.Context, k *kafkaCheck) string {
	state, detail, supervised := stateOf(p.Stats.Stats(), p.Supervision)
	switch {
	case p.Replicated && (state == cdc.StateStandby.String() || supervised && state == Waiting):
		return ""
	case supervised && detail != "":
		return state + ": " + detail
	case supervised || state != cdc.StateStreaming.String():
		return state
	}
	if err := k.ping(ctx, p.Kafka); err != nil {
		return state + ", " + kafkaDown(p.Reach) + ": " + err.Error()
	}
	return ""
}

// kafkaDown says since when Kafka has been unreachable, as far as reach
// knows.
func kafkaDown(reach KafkaReach) string {
	if reach == nil {
		return "Kafka unreachable"
	}
	msg := "Kafka unreachable"
	if since := reach.UnreachableSince(); !since.IsZero() {
		msg += " since " + since.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s (%d failed Kafka dials and requests)", msg, reach.ConnectionErrors())
}
