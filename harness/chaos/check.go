package chaos

import (
	"fmt"
	"sort"
	"time"
)

// Committed is an outbox row whose transaction committed.
type Committed struct {
	ID  int64
	Agg string
	Seq int // per-aggregate sequence number, 1, 2, ... in commit order
}

// Delivered is a record read back from Kafka.
type Delivered struct {
	ID        int64
	Agg       string
	Seq       int
	Partition int32
	Offset    int64
	Appended  time.Time // the broker's append time (the chaos topic uses LogAppendTime)
}

// Result is the verdict of Check.
type Result struct {
	Committed       int `json:"committed"`
	Published       int `json:"published_records"`
	Unique          int `json:"unique"`
	Lost            int `json:"lost"`
	Duplicates      int `json:"duplicates"`
	OrderViolations int `json:"order_violations"`
	Leaked          int `json:"leaked"`
	// LostInFailover counts the records of transactions that committed
	// on a primary, were published, and were lost with it: the promoted
	// standby never received them (a logical walsender before PostgreSQL
	// 17 sends a commit without waiting for a synchronous standby). They
	// are reported, not leaks: outboxd published a real commit.
	LostInFailover int      `json:"published_then_lost_in_failover"`
	Examples       []string `json:"examples,omitempty"` // the first few problems, for a human

	duplicateTimes []time.Time // append times of the duplicates, for attributing them to faults
}

// OK reports whether nothing was lost, leaked or reordered.
func (r Result) OK() bool { return r.Lost == 0 && r.Leaked == 0 && r.OrderViolations == 0 }

const maxExamples = 10

// Check compares what was committed (and rolled back) with what was
// delivered. Delivered records are taken per partition in offset order; an
// aggregate's first deliveries must come as seq 1, 2, 3, ... (a redelivery
// of an id already seen is a duplicate, not a violation). A delivered id
// that was rolled back, or never committed, is a leak; one of
// lostInFailover (a commit cut off by a failover, absent from the promoted
// standby) is counted in LostInFailover instead.
func Check(committed []Committed, rolledBack, lostInFailover []int64, delivered []Delivered) Result {
	r := Result{Committed: len(committed), Published: len(delivered)}
	example := func(format string, args ...any) {
		if len(r.Examples) < maxExamples {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}
	want := make(map[int64]Committed, len(committed))
	for _, c := range committed {
		want[c.ID] = c
	}
	rb := make(map[int64]bool, len(rolledBack))
	for _, id := range rolledBack {
		rb[id] = true
	}
	inFailover := make(map[int64]bool, len(lostInFailover))
	for _, id := range lostInFailover {
		inFailover[id] = true
	}
	sorted := append([]Delivered(nil), delivered...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Partition != sorted[j].Partition {
			return sorted[i].Partition < sorted[j].Partition
		}
		return sorted[i].Offset < sorted[j].Offset
	})
	seen := make(map[int64]bool, len(delivered))
	lastSeq := map[string]int{}
	for _, d := range sorted {
		if seen[d.ID] {
			r.Duplicates++
			r.duplicateTimes = append(r.duplicateTimes, d.Appended)
			continue
		}
		seen[d.ID] = true
		c, ok := want[d.ID]
		if !ok && inFailover[d.ID] {
			r.LostInFailover++
			continue
		}
		if !ok {
			r.Leaked++
			if rb[d.ID] {
				example("leaked: outbox id %d of a rolled-back transaction was published (partition %d offset %d)", d.ID, d.Partition, d.Offset)
			} else {
				example("leaked: outbox id %d was published but never committed (partition %d offset %d)", d.ID, d.Partition, d.Offset)
			}
			continue
		}
		r.Unique++
		if d.Agg != c.Agg || d.Seq != c.Seq {
			r.OrderViolations++
			example("corrupted: outbox id %d delivered as %s/%d, committed as %s/%d", d.ID, d.Agg, d.Seq, c.Agg, c.Seq)
			continue
		}
		if d.Seq != lastSeq[d.Agg]+1 {
			r.OrderViolations++
			example("reordered: aggregate %s got seq %d after %d (outbox id %d, partition %d offset %d)", d.Agg, d.Seq, lastSeq[d.Agg], d.ID, d.Partition, d.Offset)
		}
		lastSeq[d.Agg] = max(lastSeq[d.Agg], d.Seq)
	}
	for _, c := range committed {
		if !seen[c.ID] {
			r.Lost++
			example("lost: outbox id %d (aggregate %s seq %d) was committed but never published", c.ID, c.Agg, c.Seq)
		}
	}
	return r
}

// Mark is a fault injected at a time.
type Mark struct {
	Fault Fault
	At    time.Time
}

// DuplicatesByFault attributes each duplicate to the last fault injected
// before the broker appended it (the run waits for each fault's recovery
// before the next, so a fault's re-sends land before the next fault).
// Duplicates before any fault count under "none".
func (r Result) DuplicatesByFault(marks []Mark) map[Fault]int {
	out := map[Fault]int{}
	for _, t := range r.duplicateTimes {
		f := Fault("none")
		for _, m := range marks {
			if !m.At.After(t) {
				f = m.Fault
			}
		}
		out[f]++
	}
	return out
}
