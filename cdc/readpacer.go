package cdc

import (
	"net"
	"time"
)

// readPacer lets replication data pile up in the socket while it streams
// fast, so that one wake-up reads many messages.
//
// The walsender sends each message on its own. A reader that keeps up wakes
// once per message: during a backlog drain that doubled outboxd's CPU per
// event and took CPU from the walsender and the broker on the same machine.
// With the socket's receive low-water mark (SO_RCVLOWAT) raised to about
// pacerWindow's worth of data at the current rate, the kernel wakes the
// reader only once that much has arrived; data already there is read at
// once. While paced, no read waits longer than pacerWait for the mark, so
// pacing adds at most pacerWait to a message's latency; a wait that ends
// with nothing new drops the mark back to one byte.
//
// Only TCP connections on Linux are paced; elsewhere setLowat is nil and the
// pacer does nothing.
type readPacer struct {
	setLowat func(int) error // nil: not supported on this connection

	lowat       int       // current mark, bytes
	windowStart time.Time // rate window
	windowBytes int
	sinceRenew  int // bytes received since the read deadline was last set
}

const (
	// pacerWindow is how much time's worth of data a wake-up waits for.
	pacerWindow = time.Millisecond
	// pacerWait bounds one wait for the mark: after it the mark drops.
	pacerWait = 2 * time.Millisecond
	// pacerMaxLowat caps the mark.
	pacerMaxLowat = 64 << 10
	// pacerRateWindow is how often the rate, and so the mark, is revised.
	pacerRateWindow = 10 * time.Millisecond
)

func newReadPacer(c net.Conn) *readPacer {
	return &readPacer{setLowat: lowatSetter(c), lowat: 1}
}

// pacing reports whether reads currently wait for more than one byte; the
// reader then uses deadlines of at most pacerWait.
func (p *readPacer) pacing() bool { return p.lowat > 1 }

// received accounts n bytes read at now and revises the mark once per
// pacerRateWindow.
func (p *readPacer) received(n int, now time.Time) {
	p.windowBytes += n
	p.sinceRenew += n
	elapsed := now.Sub(p.windowStart)
	if elapsed < pacerRateWindow {
		return
	}
	perWindow := int(float64(p.windowBytes) * float64(pacerWindow) / float64(elapsed))
	p.windowStart, p.windowBytes = now, 0
	p.set(lowatFor(perWindow))
}

// renewed notes that the read deadline was set again.
func (p *readPacer) renewed() { p.sinceRenew = 0 }

// timedOut notes that a read deadline passed; with nothing received since
// it was set, the stream has slowed down and reads stop waiting.
func (p *readPacer) timedOut() {
	if p.sinceRenew == 0 {
		p.set(1)
	}
}

func (p *readPacer) set(lowat int) {
	if p.setLowat == nil || lowat == p.lowat {
		return
	}
	if err := p.setLowat(lowat); err != nil {
		p.setLowat = nil // not worth failing the stream over
		return
	}
	p.lowat = lowat
}

// lowatFor maps the bytes expected per pacerWindow to a mark: a power of two
// (few changes), 1 below 4 KiB (too slow to be worth waiting for), capped at
// pacerMaxLowat.
func lowatFor(perWindow int) int {
	if perWindow < 4<<10 {
		return 1
	}
	m := 4 << 10
	for m*2 <= perWindow && m*2 <= pacerMaxLowat {
		m *= 2
	}
	return m
}
