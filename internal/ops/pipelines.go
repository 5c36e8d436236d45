package ops

import (
	"encoding/json"
	"net/http"
	"time"
)

// PipelineStatus is one pipeline in GET /pipelines' answer.
type PipelineStatus struct {
	Name string `json:"name"`
	// State is the supervisor's state when it says one, else the
	// stream's (outboxd_state); Detail the supervisor's detail.
	State           string  `json:"state"`
	Detail          string  `json:"detail,omitempty"`
	ConfirmedLSN    string  `json:"confirmed_lsn"` // as PostgreSQL writes it, 0/16B3748
	LagBytes        uint64  `json:"lag_bytes"`     // outboxd_replication_lag_bytes
	LagSeconds      float64 `json:"lag_seconds"`   // outboxd_replication_lag_seconds
	InFlightRecords int     `json:"in_flight_records"`
	// KafkaUnreachableSince is set while Kafka is unreachable
	// (outboxd_kafka_unreachable_seconds).
	KafkaUnreachableSince *time.Time `json:"kafka_unreachable_since,omitempty"`
}

// Status is GET /pipelines' answer: every pipeline, sorted by name. It
// reads the pipelines' counters and pings nothing.
type Status struct {
	Pipelines []PipelineStatus `json:"pipelines"`
}

// status serves GET /pipelines.
func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	st := Status{Pipelines: []PipelineStatus{}}
	for _, p := range s.pipelines() {
		st.Pipelines = append(st.Pipelines, p.status(now))
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(st)
}

// status is p's line of GET /pipelines at now.
func (p Named) status(now time.Time) PipelineStatus {
	s := p.Status
	ps := PipelineStatus{Name: p.Name, State: string(s.State), Detail: s.Detail, ConfirmedLSN: s.Stream.ConfirmedLSN.String(),
		LagBytes: s.LagBytes(), LagSeconds: s.LagSeconds(now), InFlightRecords: s.Window.InFlightRecords}
	if since := s.Kafka.UnreachableSince; !since.IsZero() {
		since = since.UTC()
		ps.KafkaUnreachableSince = &since
	}
	return ps
}
