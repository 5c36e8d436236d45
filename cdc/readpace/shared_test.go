package readpace

import (
	"testing"
	"time"
)

// A stream too slow for a linger of its own lingers when the streams it
// shares a Shared with commit fast enough together, and its linger ends
// on the common tick; with the others quiet it is read at once.
func TestPacerLingersWithItsFleet(t *testing.T) {
	t.Parallel()
	const linger = 20 * time.Millisecond
	t0 := time.Unix(0, 0)
	tests := []struct {
		name      string
		othersPer time.Duration // the other streams' commits, this far apart (0: none)
		want      bool
	}{
		{"the others commit 1,000 a second together", time.Millisecond, true},
		{"the others are quiet", 0, false},
		{"the others commit 50 a second: below the 100 a 20 ms linger needs", 20 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shared := NewShared()
			var sock int64 = 100
			p := &Pacer{lowat: 1, rateLowat: 1, setLowat: func(int) error { return nil }, linger: linger,
				socketRead: func() int64 { return sock }, queued: func() int { return 0 }, windowStart: t0}
			p.Share(shared)
			at := time.Duration(0)
			// This stream: a transaction every 100 ms, far too slow alone.
			for i := range 10 {
				at += 100 * time.Millisecond
				if tt.othersPer > 0 {
					for o := at - 100*time.Millisecond; o < at; o += tt.othersPer {
						shared.commit(t0.Add(o))
					}
				}
				for j, n := range []int{50, 300, 30} {
					sock += int64(n)
					p.Received(n, t0.Add(at), false)
					p.Transaction(j < 2)
				}
				if i < 9 {
					p.Renewed()
					p.TimedOut() // each linger ends at its deadline
				}
			}
			lingering := p.lowat == maxLowat && p.LingerStarted()
			if lingering != tt.want {
				t.Fatalf("after its Commit: lingering %v (mark %d), want %v", lingering, p.lowat, tt.want)
			}
			if w := p.Wait(); lingering && (w > linger || w < linger/4) {
				t.Errorf("Wait while lingering = %v, want the common tick, between a quarter of the linger and the linger (%v)", w, linger)
			}
		})
	}
}

// Streams of one linger wake on the same ticks.
func TestSharedTicksAreCommon(t *testing.T) {
	t.Parallel()
	const d = 5 * time.Millisecond
	s := NewShared()
	for _, tt := range []struct{ a, b time.Duration }{
		{100 * time.Microsecond, 3 * time.Millisecond},
		{41*d + 10*time.Microsecond, 41*d + 3700*time.Microsecond},
	} {
		na, nb := s.epoch.Add(tt.a), s.epoch.Add(tt.b)
		ta, tb := na.Add(s.untilTick(na, d)), nb.Add(s.untilTick(nb, d))
		if !ta.Equal(tb) {
			t.Errorf("from %v and %v after the epoch: ticks %v apart, want one tick", tt.a, tt.b, tb.Sub(ta))
		}
		if ta.Sub(s.epoch)%d != 0 {
			t.Errorf("tick %v after the epoch, not a multiple of %v", ta.Sub(s.epoch), d)
		}
	}
	near := s.epoch.Add(d - 100*time.Microsecond) // a tick 0.1 ms away is skipped
	if w := s.untilTick(near, d); w < d/4 {
		t.Errorf("untilTick a tenth of a millisecond before a tick = %v, want the one after", w)
	}
}
