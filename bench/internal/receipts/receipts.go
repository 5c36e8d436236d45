// Package receipts counts what a reader of replication slots received and
// times each transaction from its commit to its receipt: the report
// bench/cmd/slot-reader writes and bench/cmd/fleet-bench reads, in one
// place so that the two agree on it.
package receipts

import (
	"slices"
	"sync"
	"time"
)

// Report is what a reader received, counted since its start or the last
// Reset, as JSON.
type Report struct {
	Slots        int     `json:"slots"`
	Transactions int     `json:"transactions"`
	Inserts      int     `json:"inserts"`
	P50ms        float64 `json:"p50_ms"`
	P99ms        float64 `json:"p99_ms"`
	Maxms        float64 `json:"max_ms"`
}

// Tally is the counts and each transaction's latency from its commit (the
// server's commit time) to its receipt, over every slot. Safe for
// concurrent use.
type Tally struct {
	mu        sync.Mutex
	inserts   int
	latencies []float64 // ms, one a transaction
}

// Add counts a transaction of inserts received latency after its commit.
func (t *Tally) Add(inserts int, latency time.Duration) {
	t.mu.Lock()
	t.inserts += inserts
	t.latencies = append(t.latencies, float64(latency.Microseconds())/1000)
	t.mu.Unlock()
}

// Reset forgets everything counted so far.
func (t *Tally) Reset() {
	t.mu.Lock()
	t.inserts, t.latencies = 0, t.latencies[:0]
	t.mu.Unlock()
}

// Report is what was counted since the last Reset, over slots slots.
func (t *Tally) Report(slots int) Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := Report{Slots: slots, Transactions: len(t.latencies), Inserts: t.inserts}
	lat := slices.Sorted(slices.Values(t.latencies))
	if len(lat) > 0 {
		q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		r.P50ms, r.P99ms, r.Maxms = q(0.50), q(0.99), lat[len(lat)-1]
	}
	return r
}
