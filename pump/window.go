package pump

import (
	"context"
	"sync"
)

// window bounds the records in flight and their bytes. One goroutine (the
// reader) waits in acquire or drain at a time; releases come from any
// goroutine.
type window struct {
	mu                   sync.Mutex
	records, bytes       int
	maxRecords, maxBytes int
	waiting              bool
	wake                 chan struct{} // capacity 1: a release wakes the waiter
}

func newWindow(maxRecords, maxBytes int) *window {
	return &window{maxRecords: maxRecords, maxBytes: maxBytes, wake: make(chan struct{}, 1)}
}

// acquire takes room for one record of n bytes, waiting while the window is
// full. A record that does not fit an empty window is admitted alone, so
// that one oversize record cannot wedge the pipeline. On ctx's end it
// returns ctx's error having taken nothing.
func (w *window) acquire(ctx context.Context, n int) error {
	return w.await(ctx, func() bool { return w.take(n) })
}

// tryAcquire takes room for one record of n bytes if there is room now.
func (w *window) tryAcquire(n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.take(n)
}

// take is acquire's test, under mu.
func (w *window) take(n int) bool {
	if w.records > 0 && (w.records >= w.maxRecords || w.bytes+n > w.maxBytes) {
		return false
	}
	w.records++
	w.bytes += n
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

// release returns the room of one record of n bytes.
func (w *window) release(n int) {
	w.mu.Lock()
	w.records--
	w.bytes -= n
	wake := w.waiting
	w.mu.Unlock()
	if wake {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *window) inFlight() (records, bytes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.records, w.bytes
}
