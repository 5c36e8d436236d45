package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestVerdict checks one pipeline's verdict of a fleet run: each fault's
// duplicates against its bound (a SIGTERM's and a hand-over's none, an
// exactly-once pipeline's none at all), and a poisoned pipeline's rows
// split at the poison row.
func TestVerdict(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	committed := []Committed{{1, "a", 1}, {2, "a", 2}, {3, "b", 1}, {4, "a", 3}, {5, "b", 2}}
	// deliver makes records of ids, appended at second s each, in order
	// on one partition.
	deliver := func(s int, ids ...int64) []Delivered {
		var out []Delivered
		for _, id := range ids {
			c := committed[id-1]
			out = append(out, Delivered{ID: id, Agg: c.Agg, Seq: c.Seq, Appended: at(s)})
		}
		return out
	}
	join := func(ds ...[]Delivered) []Delivered {
		var out []Delivered
		for _, d := range ds {
			out = append(out, d...)
		}
		for i := range out {
			out[i].Offset = int64(i)
		}
		return out
	}
	tests := []struct {
		name        string
		exactlyOnce bool
		delivered   []Delivered
		marks       []Mark
		poisonID    int64
		boundary    int
		problems    []string // each a part of one problem, in order
	}{
		{name: "every row once", delivered: join(deliver(1, 1, 2, 3, 4, 5)), marks: []Mark{{FaultSIGTERM, at(0)}}},
		{name: "a kill's duplicates within its bound", delivered: join(deliver(1, 1, 2, 3), deliver(3, 2, 3, 4, 5)),
			marks: []Mark{{FaultSIGTERM, at(0)}, {FaultKill9, at(2)}}},
		{name: "a SIGTERM's duplicate", delivered: join(deliver(1, 1, 2, 3), deliver(3, 3, 4, 5)),
			marks: []Mark{{FaultKill9, at(0)}, {FaultSIGTERM, at(2)}}, problems: []string{"1 duplicates after sigterm_restart, over their bound 0"}},
		{name: "a hand-over's duplicate", delivered: join(deliver(1, 1, 2, 3), deliver(5, 3, 4, 5)),
			marks: []Mark{{FaultKill9, at(0)}, {FaultHandover, at(4)}}, problems: []string{"1 duplicates after handover, over their bound 0"}},
		{name: "a duplicate before any fault", delivered: join(deliver(1, 1, 2, 2, 3, 4, 5)), marks: []Mark{{FaultKill9, at(3)}},
			problems: []string{"1 duplicates after none, over their bound 0"}},
		{name: "an exactly-once pipeline's kill", exactlyOnce: true, delivered: join(deliver(1, 1, 2, 3), deliver(3, 3, 4, 5)),
			marks: []Mark{{FaultKill9, at(2)}}, problems: []string{"(exactly-once): 1 duplicates after kill9, over their bound 0"}},
		{name: "lost and reordered", delivered: join(deliver(1, 1, 4, 2, 3)), problems: []string{"lost 1, leaked 0, order violations 2"}},
		{name: "poisoned: nothing after it published", delivered: join(deliver(1, 1, 2, 3), deliver(3, 2)), poisonID: 9, boundary: 3,
			marks: []Mark{{FaultPoisonRow, at(2)}}},
		{name: "poisoned: a row before it lost", delivered: join(deliver(1, 1, 2)), poisonID: 9, boundary: 3,
			marks: []Mark{{FaultPoisonRow, at(2)}}, problems: []string{"lost 1"}},
		{name: "poisoned: published past it", delivered: join(deliver(1, 1, 2, 3), []Delivered{{ID: 9, Agg: "poison", Appended: at(3)}}, deliver(3, 4)),
			poisonID: 9, boundary: 3, marks: []Mark{{FaultPoisonRow, at(2)}},
			problems: []string{"the poison row (outbox id 9), over --max-record-bytes, was published", "1 of the 2 events committed after the poison row were published past it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, poison := verdict(pipelineOutcome{name: "p", exactlyOnce: tt.exactlyOnce, committed: committed, delivered: tt.delivered, marks: tt.marks,
				start: float64(t0.Unix()), poisonID: tt.poisonID, boundary: tt.boundary, maxInFlight: 1, per100ms: 1})
			if len(r.Problems) != len(tt.problems) {
				t.Fatalf("problems %q, want %d like %q", r.Problems, len(tt.problems), tt.problems)
			}
			for i, want := range tt.problems {
				if !strings.Contains(r.Problems[i], want) {
					t.Errorf("problem %d: %q, want it to say %q", i, r.Problems[i], want)
				}
			}
			if (poison != nil) != (tt.poisonID != 0) {
				t.Errorf("poison report %+v for poison id %d", poison, tt.poisonID)
			}
		})
	}
}
