package chaos

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCheckFindsPlantedFaults feeds the checker streams with a planted loss,
// duplicate, reorder and leak, and a clean one.
func TestCheckFindsPlantedFaults(t *testing.T) {
	t.Parallel()
	committed := []Committed{{1, "a", 1}, {2, "a", 2}, {3, "b", 1}, {4, "a", 3}, {5, "b", 2}}
	rolledBack := []int64{6}
	lostInFailover := []int64{7}
	d := func(id int64, agg string, seq int, part int32, off int64) Delivered {
		return Delivered{ID: id, Agg: agg, Seq: seq, Partition: part, Offset: off}
	}
	clean := []Delivered{d(1, "a", 1, 0, 0), d(2, "a", 2, 0, 1), d(4, "a", 3, 0, 2), d(3, "b", 1, 1, 0), d(5, "b", 2, 1, 1)}
	tests := []struct {
		name      string
		delivered []Delivered
		want      Result
		example   string
	}{
		{"clean", clean, Result{Committed: 5, Published: 5, Unique: 5}, ""},
		{"loss", []Delivered{clean[0], clean[1], clean[2], clean[3]}, Result{Committed: 5, Published: 4, Unique: 4, Lost: 1}, "lost: outbox id 5"},
		{"duplicate after redelivery", append(append([]Delivered{}, clean[:2]...), d(1, "a", 1, 0, 5), d(2, "a", 2, 0, 6), d(4, "a", 3, 0, 7), clean[3], clean[4]),
			Result{Committed: 5, Published: 7, Unique: 5, Duplicates: 2}, ""},
		{"reorder", []Delivered{d(2, "a", 2, 0, 0), d(1, "a", 1, 0, 1), d(4, "a", 3, 0, 2), clean[3], clean[4]},
			Result{Committed: 5, Published: 5, Unique: 5, OrderViolations: 2}, "reordered: aggregate a got seq 2 after 0"},
		{"leak of a rolled-back row", append(append([]Delivered{}, clean...), d(6, "b", 3, 1, 2)),
			Result{Committed: 5, Published: 6, Unique: 5, Leaked: 1}, "rolled-back transaction"},
		{"leak of an unknown row", append(append([]Delivered{}, clean...), d(99, "b", 3, 1, 2)),
			Result{Committed: 5, Published: 6, Unique: 5, Leaked: 1}, "never committed"},
		{"a commit lost with its primary", append(append([]Delivered{}, clean...), d(7, "b", 3, 1, 2)),
			Result{Committed: 5, Published: 6, Unique: 5, LostInFailover: 1}, ""},
		{"offsets, not arrival order, decide", []Delivered{clean[2], clean[1], clean[0], clean[4], clean[3]}, Result{Committed: 5, Published: 5, Unique: 5}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Check(committed, rolledBack, lostInFailover, tt.delivered)
			examples := strings.Join(got.Examples, "\n")
			got.Examples, got.duplicateTimes = nil, nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Check = %+v, want %+v\n%s", got, tt.want, examples)
			}
			if tt.example != "" && !strings.Contains(examples, tt.example) {
				t.Errorf("examples lack %q:\n%s", tt.example, examples)
			}
			if wantOK := tt.want.Lost == 0 && tt.want.Leaked == 0 && tt.want.OrderViolations == 0; got.OK() != wantOK {
				t.Errorf("OK() = %v, want %v", got.OK(), wantOK)
			}
		})
	}
}

// TestDuplicatesByFault attributes each duplicate to the last fault before
// the broker appended it.
func TestDuplicatesByFault(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	committed := []Committed{{1, "a", 1}, {2, "a", 2}, {3, "a", 3}}
	delivered := []Delivered{
		{ID: 1, Agg: "a", Seq: 1, Offset: 0, Appended: at(0)},
		{ID: 1, Agg: "a", Seq: 1, Offset: 1, Appended: at(1)}, // before any fault
		{ID: 2, Agg: "a", Seq: 2, Offset: 2, Appended: at(2)},
		{ID: 2, Agg: "a", Seq: 2, Offset: 3, Appended: at(11)}, // after the kill
		{ID: 1, Agg: "a", Seq: 1, Offset: 4, Appended: at(12)}, // after the kill
		{ID: 3, Agg: "a", Seq: 3, Offset: 5, Appended: at(13)},
		{ID: 3, Agg: "a", Seq: 3, Offset: 6, Appended: at(21)}, // after the walsender termination
	}
	got := Check(committed, nil, nil, delivered).DuplicatesByFault([]Mark{{FaultKill9, at(10)}, {FaultWalsender, at(20)}})
	want := map[Fault]int{"none": 1, FaultKill9: 2, FaultWalsender: 1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DuplicatesByFault = %v, want %v", got, want)
	}
}
