package chaos

import (
	"fmt"
	"slices"
)

// FleetReport is the outcome of a fleet run.
type FleetReport struct {
	Pipelines       int `json:"pipelines"`
	Replicas        int `json:"replicas"`
	KafkaNodes      int `json:"kafka_nodes"`
	PostgresVersion int `json:"postgres_version_num"`
	RatePerPipeline int `json:"events_per_second_per_pipeline"`
	// The sums over the pipelines of their results.
	Committed       int           `json:"committed"`
	Published       int           `json:"published_records"`
	Lost            int           `json:"lost"`
	Leaked          int           `json:"leaked"`
	OrderViolations int           `json:"order_violations"`
	Duplicates      int           `json:"duplicates"`
	FaultsInjected  map[Fault]int `json:"faults_injected"`
	Faults          []FleetFault  `json:"faults"`
	// Takeovers is each kill -9: from the kill to each of the killed
	// replica's pipelines streaming on another replica (as their GET
	// /pipelines says, polled every 100 ms).
	Takeovers        []FleetTakeover `json:"takeovers"`
	TakeoverMS       []float64       `json:"takeover_ms"`
	TakeoverMedianMS float64         `json:"takeover_median_ms"`
	TakeoverMaxMS    float64         `json:"takeover_max_ms"`
	// Spread is how many pipelines streamed on each replica at the start
	// and after each fault's recovery (and each return of a replica).
	Spread   []FleetSpread    `json:"spread"`
	Poison   *PoisonReport    `json:"poison,omitempty"`
	Pipeline []PipelineReport `json:"per_pipeline"`
	// Problems are the run's failures: a pipeline's verdict, a replica
	// that exited on its own or not cleanly, a recovery that did not come.
	Problems     []string `json:"problems,omitempty"`
	TotalSeconds float64  `json:"total_seconds"`
}

// OK reports whether every pipeline passed and nothing misbehaved.
func (r FleetReport) OK() bool { return len(r.Problems) == 0 }

// FleetFault is one fault as injected.
type FleetFault struct {
	Fault   Fault   `json:"fault"`
	Seconds float64 `json:"seconds"`           // since the run started
	Replica *int    `json:"replica,omitempty"` // the replica killed or stopped
	Node    int32   `json:"node,omitempty"`    // the broker killed
	// Pipelines are the pipelines it hit: those the replica streamed, the
	// one whose walsender, database or row it was, or, for a broker,
	// every pipeline (the exactly-once ones it coordinated in Note).
	Pipelines []string `json:"pipelines"`
	// RecoveredMS is from the fault (a replica's or a database's return)
	// to every pipeline streaming again with its slot confirmed to where
	// the WAL was then.
	RecoveredMS float64 `json:"recovered_ms,omitempty"`
	Note        string  `json:"note,omitempty"`
}

// FleetTakeover is one kill -9's takeovers.
type FleetTakeover struct {
	Replica   int          `json:"replica"`
	Seconds   float64      `json:"seconds"`
	Pipelines []PipelineMS `json:"pipelines"`
}

// PipelineMS is a pipeline's time.
type PipelineMS struct {
	Pipeline string  `json:"pipeline"`
	MS       float64 `json:"ms"`
}

// FleetSpread is the count of pipelines streaming on each replica at one
// moment.
type FleetSpread struct {
	After     string  `json:"after"`
	Seconds   float64 `json:"seconds"`
	Streaming []int   `json:"streaming_per_replica"` // -1: the replica is down
	// OnPreferred counts the pipelines streaming on the replica ranked
	// first for them.
	OnPreferred int `json:"on_preferred_replica"`
}

// PoisonReport is what became of the poison row.
type PoisonReport struct {
	Pipeline       string `json:"pipeline"`
	ID             int64  `json:"outbox_id"`
	PayloadBytes   int    `json:"payload_bytes"`
	MaxRecordBytes int    `json:"max_record_bytes"`
	// CommittedBefore and CommittedAfter are the pipeline's events
	// committed before the poison row and after it: those must all be
	// published, these none.
	CommittedBefore      int     `json:"committed_before"`
	CommittedAfter       int     `json:"committed_after"`
	PublishedAfter       int     `json:"published_after"`
	PoisonRowPublished   bool    `json:"poison_row_published"`
	BackingOffAfterMS    float64 `json:"backing_off_after_ms"` // from the insert to a replica saying so
	BackingOffDetail     string  `json:"backing_off_detail"`
	OthersCommittedAfter int     `json:"others_committed_after"` // the other pipelines' events committed after it, all published
}

// PipelineReport is one pipeline's verdict.
type PipelineReport struct {
	Name     string `json:"name"`
	Delivery string `json:"delivery"`
	Result
	// Faults are the faults that hit the pipeline, in order; duplicates
	// are attributed to the last one before the broker appended them.
	Faults                []FaultAt     `json:"faults"`
	DuplicatesByFault     map[Fault]int `json:"duplicates_by_fault"`
	DuplicateBoundByFault map[Fault]int `json:"duplicate_bound_by_fault"`
	MaxEventsPer100ms     int           `json:"max_events_per_100ms"`
	Problems              []string      `json:"problems,omitempty"`
}

// pipelineOutcome is what a pipeline's verdict is made of.
type pipelineOutcome struct {
	name        string
	exactlyOnce bool
	committed   []Committed
	rolledBack  []int64
	delivered   []Delivered
	marks       []Mark
	start       float64 // unix seconds the run started, for FaultAt
	// poisonID is the poison row's id (0: not poisoned), and boundary the
	// number of committed rows before it.
	poisonID    int64
	boundary    int
	maxInFlight int
	per100ms    int
}

// verdict checks a pipeline: nothing lost, leaked or reordered; each
// fault's duplicates within its bound (none for SIGTERM, hand-overs, a
// broker's death, and any fault of an exactly-once pipeline); for the
// poisoned pipeline, the rows committed before the poison row checked so,
// and nothing committed after it, nor itself, published. The poison row's
// own duplicates (the pipeline starting again and again up to it) are
// reported, not bounded.
func verdict(o pipelineOutcome) (PipelineReport, *PoisonReport) {
	r := PipelineReport{Name: o.name, Delivery: "at-least-once", MaxEventsPer100ms: o.per100ms}
	if o.exactlyOnce {
		r.Delivery = "exactly-once"
	}
	committed, delivered := o.committed, o.delivered
	var poison *PoisonReport
	if o.poisonID != 0 {
		poison = &PoisonReport{Pipeline: o.name, ID: o.poisonID, CommittedBefore: o.boundary, CommittedAfter: len(committed) - o.boundary}
		after := map[int64]bool{}
		for _, c := range committed[o.boundary:] {
			after[c.ID] = true
		}
		committed = committed[:o.boundary]
		delivered = nil
		for _, d := range o.delivered {
			switch {
			case d.ID == o.poisonID:
				poison.PoisonRowPublished = true
			case after[d.ID]:
				poison.PublishedAfter++
			default:
				delivered = append(delivered, d)
			}
		}
		if poison.PoisonRowPublished {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: the poison row (outbox id %d), over --max-record-bytes, was published", o.name, o.poisonID))
		}
		if poison.PublishedAfter > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %d of the %d events committed after the poison row were published past it", o.name, poison.PublishedAfter, poison.CommittedAfter))
		}
	}
	r.Result = Check(committed, o.rolledBack, nil, delivered)
	if !r.Result.OK() {
		r.Problems = append(r.Problems, fmt.Sprintf("%s: lost %d, leaked %d, order violations %d: %v", o.name, r.Lost, r.Leaked, r.OrderViolations, r.Examples))
	}
	r.DuplicatesByFault = r.Result.DuplicatesByFault(o.marks)
	r.DuplicateBoundByFault = map[Fault]int{}
	for _, m := range o.marks {
		r.Faults = append(r.Faults, FaultAt{Fault: m.Fault, Seconds: float64(m.At.UnixMicro())/1e6 - o.start})
		if m.Fault != FaultPoisonRow {
			r.DuplicateBoundByFault[m.Fault] += fleetFaultBound(m.Fault, o.exactlyOnce, o.maxInFlight, o.per100ms)
		}
	}
	faults := make([]Fault, 0, len(r.DuplicatesByFault))
	for f := range r.DuplicatesByFault {
		faults = append(faults, f)
	}
	slices.Sort(faults)
	for _, f := range faults {
		n := r.DuplicatesByFault[f]
		if f == FaultPoisonRow {
			continue
		}
		if bound := r.DuplicateBoundByFault[f]; n > bound {
			r.Problems = append(r.Problems, fmt.Sprintf("%s (%s): %d duplicates after %s, over their bound %d", o.name, r.Delivery, n, f, bound))
		}
	}
	return r, poison
}

// fleetFaultBound is faultBound for a fleet run's faults: a database that
// refuses connections for a while ends the session as a walsender's
// termination does (the open transaction is sent again); a replica's
// return hands pipelines over gracefully, and a broker's death, the
// coordinator's included, loses nothing the idempotent producer or the
// transaction has not: none.
func fleetFaultBound(f Fault, exactlyOnce bool, maxInFlight, per100ms int) int {
	switch f {
	case FaultDatabaseUnreachable:
		f = FaultWalsender
	case FaultHandover, FaultCoordinatorKill:
		return 0
	}
	return faultBound(f, exactlyOnce, maxInFlight, per100ms)
}
