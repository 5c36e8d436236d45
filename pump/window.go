package pump

import (
	"context"
	"sync"
)

// window bounds the records in flight and their bytes. One goroutine (the
// reader) waits in acquire or drain at a time; releases come from any
// goroutine.
//
// It also keeps the records holding room in the order they took it, as a
// list through record.prev and record.next (no allocation, O(1) under the
// lock each already takes): the first is the oldest record not done,
// whatever order the sink reports them done in (see state).
//
// With a Budget, room is also taken from the process's budget, shared with
// the other pipelines' windows; a release there wakes this window's
// waiter too.
type window struct {
	mu                   sync.Mutex
	records, bytes       int
	maxRecords, maxBytes int
	waiting              bool
	wake                 chan struct{} // capacity 1: a release wakes the waiter
	first, last          *record       // the records holding room, oldest first

	budget *Budget // nil: none
	// budgetWaiting: the budget refused room; its next release elsewhere
	// wakes this window. Under the budget's lock.
	budgetWaiting bool
}

func newWindow(maxRecords, maxBytes int, budget *Budget) *window {
	return &window{maxRecords: maxRecords, maxBytes: maxBytes, wake: make(chan struct{}, 1), budget: budget}
}

// signal wakes the window's waiter, if any.
func (w *window) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// acquire takes room for r (r.size bytes), waiting while the window is
// full. A record that does not fit an empty window is admitted alone, so
// that one oversize record cannot wedge the pipeline. On ctx's end it
// returns ctx's error having taken nothing.
func (w *window) acquire(ctx context.Context, r *record) error {
	return w.await(ctx, func() bool { return w.take(r) })
}

// tryAcquire takes room for r if there is room now.
func (w *window) tryAcquire(r *record) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.take(r)
}

// take is acquire's test, under mu.
func (w *window) take(r *record) bool {
	if w.records > 0 && (w.records >= w.maxRecords || w.bytes+r.size > w.maxBytes) {
		return false
	}
	if w.budget != nil && !w.budget.take(w, r.size) {
		return false
	}
	w.records++
	w.bytes += r.size
	r.released = false
	r.prev, r.next = w.last, nil
	if w.last != nil {
		w.last.next = r
	} else {
		w.first = r
	}
	w.last = r
	return true
}

// drain waits until nothing is in flight.
func (w *window) drain(ctx context.Context) error {
	return w.await(ctx, func() bool { return w.records == 0 })
}

// await waits until ok (called under mu) holds.
func (w *window) await(ctx context.Context, ok func() bool) error {
	for {
		w.mu.Lock()
		if ok() {
			w.waiting = false
			w.mu.Unlock()
			return nil
		}
		w.waiting = true
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-ctx.Done():
			w.mu.Lock()
			w.waiting = false
			w.mu.Unlock()
			return ctx.Err()
		}
	}
}

// release returns the room r took, once: a record released again (a
// panic's recovery, see record.done) changes nothing.
func (w *window) release(r *record) {
	w.mu.Lock()
	if r.released {
		w.mu.Unlock()
		return
	}
	r.released = true
	w.records--
	w.bytes -= r.size
	if w.budget != nil {
		w.budget.release(w, r.size) // under mu: a take here cannot slip in between
	}
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		w.first = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		w.last = r.prev
	}
	r.prev, r.next = nil, nil
	wake := w.waiting
	w.mu.Unlock()
	if wake {
		w.signal()
	}
}

func (w *window) inFlight() (records, bytes int) {
	records, bytes, _ = w.state()
	return records, bytes
}

// state returns the records in flight, their bytes, and the commit time
// (unix nanoseconds) of the oldest of them: 0 when there is none or it has
// none (a dead letter of a row outside any transaction).
func (w *window) state() (records, bytes int, oldestCommit int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first != nil {
		oldestCommit = w.first.commitNS
	}
	return w.records, w.bytes, oldestCommit
}
