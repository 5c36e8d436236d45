package readpace

import (
	"sync"
	"time"
)

// Shared lets the streams of one process linger together. One stream of
// a fleet rarely sees transactions fast enough for its own linger to
// engage (a hundred pipelines at ten transactions a second each), yet
// every transaction wakes the process once or more. With a Shared, a
// pacer lingers after a Commit whenever the commits of all its streams
// together bring at least LingerMinTx per linger, and its linger ends on
// a tick common to all of them (a multiple of the linger since the
// Shared began): the streams' readers then wake together, and one
// wake-up of the process reads what all of them received. A message
// waits at most a linger and a quarter (a tick nearer than a quarter of
// a linger is skipped for the one after). Safe for concurrent use.
type Shared struct {
	epoch time.Time

	mu     sync.Mutex
	window time.Time // start of the window commits are counted in
	count  int       // commits in it so far
	rate   float64   // commits per second of all streams, in the last whole window
}

// NewShared returns a Shared with no stream yet.
func NewShared() *Shared { return &Shared{epoch: time.Now()} }

// commit counts a Commit received at now, and revises the rate once per
// txRateRevision.
func (s *Shared) commit(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	if s.window.IsZero() {
		s.window, s.count = now, 0
		return
	}
	if elapsed := now.Sub(s.window); elapsed >= txRateRevision {
		s.rate = float64(s.count) / elapsed.Seconds()
		s.window, s.count = now, 0
	}
}

// engaged reports whether the streams together commit fast enough for a
// linger of d to bring LingerMinTx transactions to the process.
func (s *Shared) engaged(d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rate >= EngagesFrom(d)
}

// untilTick is the time from now to the next tick of a linger of d (a
// multiple of d since the Shared began: streams of one linger share
// ticks) at least a quarter of d away (a tick nearer than that would wake
// the reader for almost nothing).
func (s *Shared) untilTick(now time.Time, d time.Duration) time.Duration {
	since := now.Sub(s.epoch)
	next := (since/d + 1) * d
	if next-since < d/4 {
		next += d
	}
	return next - since
}
