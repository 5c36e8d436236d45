package pump

import (
	"sync"
	"sync/atomic"
)

// Budget is one process's in-flight budget: the records and bytes that
// all its pipelines' windows together may hold (Config.Budget), so that a
// process of many pipelines stays within its memory whatever Kafka does.
// Safe for concurrent use.
//
// It is shared fairly: each window that takes part has a reserved share,
// half the budget split evenly among them, that no other window can take;
// the other half is lent first come, first served. A window under its
// share always gets room (none starves while Kafka keeps the others'
// records), and one busy pipeline among idle ones may still use over half
// the budget. A window with nothing in flight may always take one record,
// whatever its size (as its own window admits an oversize record alone),
// so the budget can be exceeded by that much.
type Budget struct {
	maxRecords, maxBytes int

	mu      sync.Mutex
	windows map[*window]*use
	total   use // taken by every window
	// lent is what windows took beyond their reserved shares.
	lent use
	// Mirrors of total, for Stats without the lock.
	records, bytes atomic.Int64
}

// use is room taken.
type use struct{ records, bytes int }

// NewBudget returns a Budget of maxRecords records and maxBytes bytes
// (each at least 1).
func NewBudget(maxRecords, maxBytes int) *Budget {
	return &Budget{maxRecords: max(maxRecords, 1), maxBytes: max(maxBytes, 1), windows: map[*window]*use{}}
}

// BudgetStats is what a Budget holds and how much of it is taken.
type BudgetStats struct {
	MaxRecords, MaxBytes int
	Records, Bytes       int // taken by every pipeline's records in flight
	Pipelines            int // windows taking part
}

// Stats returns a snapshot.
func (b *Budget) Stats() BudgetStats {
	b.mu.Lock()
	n := len(b.windows)
	b.mu.Unlock()
	return BudgetStats{MaxRecords: b.maxRecords, MaxBytes: b.maxBytes, Records: int(b.records.Load()), Bytes: int(b.bytes.Load()), Pipelines: n}
}

// join makes w take part (its reserved share comes out of the others').
func (b *Budget) join(w *window) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.windows[w] == nil {
		b.windows[w] = &use{}
		b.relend()
	}
}

// leave ends w's part; whatever it still holds is given back.
func (b *Budget) leave(w *window) {
	b.mu.Lock()
	u := b.windows[w]
	if u == nil {
		b.mu.Unlock()
		return
	}
	b.total.records -= u.records
	b.total.bytes -= u.bytes
	delete(b.windows, w)
	b.relend()
	b.mirror()
	waiting := b.waitingLocked(nil)
	b.mu.Unlock()
	wakeAll(waiting)
}

// reserved is each window's reserved share. Under mu.
func (b *Budget) reserved() use {
	n := max(len(b.windows), 1)
	return use{records: b.maxRecords / (2 * n), bytes: b.maxBytes / (2 * n)}
}

// relend recounts what is lent after the windows changed (and with them
// the reserved share). Under mu.
func (b *Budget) relend() {
	r := b.reserved()
	b.lent = use{}
	for _, u := range b.windows {
		b.lent.records += max(0, u.records-r.records)
		b.lent.bytes += max(0, u.bytes-r.bytes)
	}
}

// take takes room for one record of size bytes for w, if the budget
// allows it now (see Budget).
func (b *Budget) take(w *window, size int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.windows[w]
	if u == nil {
		return true // not taking part
	}
	r := b.reserved()
	more := use{records: lentBeyond(u.records+1, r.records) - lentBeyond(u.records, r.records),
		bytes: lentBeyond(u.bytes+size, r.bytes) - lentBeyond(u.bytes, r.bytes)}
	lendable := use{records: b.maxRecords - len(b.windows)*r.records, bytes: b.maxBytes - len(b.windows)*r.bytes}
	fits := b.total.records+1 <= b.maxRecords && b.total.bytes+size <= b.maxBytes &&
		b.lent.records+more.records <= lendable.records && b.lent.bytes+more.bytes <= lendable.bytes
	if !fits && u.records > 0 {
		w.budgetWaiting = true
		return false
	}
	u.records++
	u.bytes += size
	b.total.records++
	b.total.bytes += size
	b.lent.records += more.records
	b.lent.bytes += more.bytes
	b.mirror()
	return true
}

// release gives back room for one record of size bytes that w took, and
// wakes the windows waiting for the budget.
func (b *Budget) release(w *window, size int) {
	b.mu.Lock()
	u := b.windows[w]
	if u == nil {
		b.mu.Unlock()
		return
	}
	r := b.reserved()
	b.lent.records -= lentBeyond(u.records, r.records) - lentBeyond(u.records-1, r.records)
	b.lent.bytes -= lentBeyond(u.bytes, r.bytes) - lentBeyond(u.bytes-size, r.bytes)
	u.records--
	u.bytes -= size
	b.total.records--
	b.total.bytes -= size
	b.mirror()
	waiting := b.waitingLocked(w)
	b.mu.Unlock()
	wakeAll(waiting)
}

// waitingLocked takes the windows, but except, that wait for the budget.
// Under mu.
func (b *Budget) waitingLocked(except *window) []*window {
	var out []*window
	for w := range b.windows {
		if w != except && w.budgetWaiting {
			w.budgetWaiting = false
			out = append(out, w)
		}
	}
	return out
}

func (b *Budget) mirror() {
	b.records.Store(int64(b.total.records))
	b.bytes.Store(int64(b.total.bytes))
}

// lentBeyond is how much of x lies beyond a reserved share r.
func lentBeyond(x, r int) int { return max(0, x-r) }

func wakeAll(ws []*window) {
	for _, w := range ws {
		w.signal()
	}
}
