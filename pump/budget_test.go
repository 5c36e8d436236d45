package pump

import (
	"context"
	"testing"
	"time"
)

// taker is a window of a budget for the test, taking records of size
// bytes.
type taker struct {
	t *testing.T
	w *window
}

func joined(t *testing.T, b *Budget) taker {
	w := newWindow(1<<30, 1<<30, b)
	b.join(w)
	return taker{t, w}
}

// take takes n records of size bytes, each only if there is room now; it
// returns those it took.
func (k taker) take(n, size int) []*record {
	var got []*record
	for range n {
		r := &record{size: size}
		if !k.w.tryAcquire(r) {
			break
		}
		got = append(got, r)
	}
	return got
}

// TestBudgetIsSharedFairly is issue 49, item 2: each pipeline's window was
// bounded alone (16 MiB by default), so a process of many pipelines had
// no bound when Kafka was slow or gone, and in a container it was killed
// for its memory. A budget bounds them all together, and keeps for each a
// reserved share that the others cannot take.
func TestBudgetIsSharedFairly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		maxRecords  int
		maxBytes    int
		windows     int
		busyTakes   int // records of size the first window tries to take
		size        int
		wantBusy    int // it gets
		othersEach  int // records of size each other window gets after it
		wantRecords int // taken in all, never above maxRecords
	}{
		// 4 windows, 100 records: 12 reserved each (100/8), 52 lendable.
		{name: "one busy pipeline takes its share and what is lent", maxRecords: 100, maxBytes: 1 << 30, windows: 4, busyTakes: 1000, size: 1,
			wantBusy: 64, othersEach: 12, wantRecords: 100},
		// By bytes: 1000 bytes over 2 windows: 250 reserved each, 500 lent.
		{name: "by bytes", maxRecords: 1000, maxBytes: 1000, windows: 2, busyTakes: 1000, size: 10, wantBusy: 75, othersEach: 25, wantRecords: 100},
		{name: "alone, it may take all of it", maxRecords: 100, maxBytes: 1 << 30, windows: 1, busyTakes: 1000, size: 1, wantBusy: 100, wantRecords: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := NewBudget(tt.maxRecords, tt.maxBytes)
			var ws []taker
			for range tt.windows {
				ws = append(ws, joined(t, b))
			}
			if got := len(ws[0].take(tt.busyTakes, tt.size)); got != tt.wantBusy {
				t.Errorf("the busy pipeline took %d records, want %d", got, tt.wantBusy)
			}
			for i, w := range ws[1:] {
				if got := len(w.take(1000, tt.size)); got != tt.othersEach {
					t.Errorf("pipeline %d took %d records after the busy one, want its share %d", i+2, got, tt.othersEach)
				}
			}
			st := b.Stats()
			if st.Records != tt.wantRecords || st.Records > tt.maxRecords || st.Bytes > tt.maxBytes {
				t.Errorf("taken %d records, %d bytes; want %d records, within %d and %d bytes", st.Records, st.Bytes, tt.wantRecords, tt.maxRecords, tt.maxBytes)
			}
		})
	}
}

// A window with nothing in flight takes one record whatever its size, so
// that a record larger than its share cannot wedge its pipeline.
func TestBudgetAdmitsAnOversizeRecordAlone(t *testing.T) {
	t.Parallel()
	b := NewBudget(100, 1000)
	big, small := joined(t, b), joined(t, b)
	if got := len(small.take(100, 10)); got != 75 { // 25 reserved + 50 lent
		t.Fatalf("took %d, want 75", got)
	}
	if got := len(big.take(2, 5000)); got != 1 {
		t.Errorf("took %d oversize records with nothing in flight, want 1 (alone)", got)
	}
}

// A release by one pipeline wakes another that waits for the budget, and a
// pipeline leaving gives its share to the others.
func TestBudgetReleaseWakesTheOthers(t *testing.T) {
	t.Parallel()
	b := NewBudget(4, 1<<30)
	a, c := joined(t, b), joined(t, b)
	held := a.take(3, 1) // 1 reserved + 2 lent
	c.take(1, 1)         // c's reserve
	waiter := &record{size: 1}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got <- c.w.acquire(ctx, waiter)
	}()
	select {
	case err := <-got:
		t.Fatalf("acquire with the budget full returned %v, want it to wait", err)
	case <-time.After(100 * time.Millisecond):
	}
	a.w.release(held[0])
	if err := <-got; err != nil {
		t.Fatalf("acquire after another pipeline's release: %v, want room", err)
	}

	b.leave(a.w)
	if st := b.Stats(); st.Pipelines != 1 || st.Records != 2 {
		t.Errorf("after a pipeline left: %+v, want 1 pipeline and c's 2 records", st)
	}
	if got := len(c.take(10, 1)); got != 2 {
		t.Errorf("alone, c took %d more, want the 2 left of 4", got)
	}
}
