package cdc

import (
	"net"
	"time"
)

// readPacer lets replication data pile up in the socket, so that one
// wake-up reads many messages. Each wake-up of outboxd costs far more CPU
// than the messages it reads: on the 2-core test machine a steady stream
// of 10-row transactions cost 40-75 µs of CPU per event while it was read
// a message per wake-up, against about 5 µs per event in a backlog drain.
//
// The walsender sends each message on its own, so a reader that keeps up
// wakes once per message. The pacer raises the socket's receive low-water
// mark (SO_RCVLOWAT): the kernel then wakes the reader only once that much
// has arrived, while data already there is read at once. Two cases call
// for it:
//
//   - A fast stream (a backlog drain): the mark is about pacerWindow's
//     worth of data at the current rate (4-64 KiB), revised every
//     pacerRateWindow. Waiting at most pacerWait for it adds at most that to
//     a message's latency.
//   - An open transaction, at any rate. pgoutput sends a transaction only
//     once it committed, all of it back to back, so after its Begin the
//     rest is already on its way: the mark goes to what the rest of the
//     transaction is expected to weigh (below), else to pacerMaxLowat, and
//     a read waits at most pacerTxWait, then takes whatever came. A 10-row
//     transaction is then read in about two wake-ups instead of twelve.
//     The mark drops back at its Commit, so that the next transaction's
//     Begin wakes the reader at once and an idle stream costs nothing.
//     In make bench (docs/bench/steady/run-3 and run-4, 5 runs per rate)
//     this cut outboxd's CPU per event to 0.71-0.89 x at 1k-10k events/s
//     and its p99 at 10k events/s from 201-204 ms to 28-79 ms; the price
//     was up to a millisecond on the median at 1k events/s (2.4 against
//     1.8 ms in run-4, equal in run-3), which the expected rest removes.
//
// The expected rest: the smallest of the last pacerSizes transactions
// (Begin to Commit, as sent), less what of this one was read from the
// socket already (pgconn reads ahead of the messages it returns). Where
// transactions are alike, the reader then wakes the moment the last byte
// of the Commit arrives instead of at the end of pacerTxWait; a smaller
// one waits for pacerTxWait as before, a larger one is read in one more
// wake-up. It needs the bytes read from the socket (package cdc's
// activity), so a TLS connection, whose socket carries more than the
// messages, waits for pacerMaxLowat instead. Measured at a steady 1,000
// events/s (10-row transactions) before it: commit to outboxd's receipt
// p50 1.74 ms with the walsender sending at 0.97 ms, most of the
// difference the wait.
//
// A wait that ends with nothing new drops the mark back to one byte (for a
// stalled transaction, until its end): nothing waits on a stream that has
// gone quiet.
//
// The linger (Config.ReadLinger; off in the library's zero Config, 5 ms in
// the outboxd command) trades latency for CPU at
// steady rates: after a Commit that came less than the linger after the
// one before, while transactions come fast enough that at least
// lingerMinTx are expected per linger, with nothing but a keepalive left
// to read, the mark goes to pacerMaxLowat for the linger, so that the
// transactions arriving meanwhile are read, and published, in one
// wake-up. A keepalive read
// meanwhile does not end it; any other message, or the linger's end, does.
// An idle stream (a Commit longer than the linger after the one before)
// or a slow one is read at once as before. It needs the count of the stream's own bytes
// (not under TLS) and the socket's queue (Linux): without them it is off.
//
// Only TCP connections on Linux are paced; elsewhere setLowat is nil and the
// pacer does nothing.
type readPacer struct {
	setLowat func(int) error // nil: not supported on this connection

	lowat       int       // current mark, bytes
	rateLowat   int       // the mark the rate calls for
	inTx        bool      // a transaction is open (Begin read, Commit not yet)
	txStalled   bool      // the open transaction went quiet: stop waiting for it
	windowStart time.Time // rate window
	windowBytes int
	sinceRenew  int // bytes received since the read deadline was last set

	// For the expected rest of an open transaction (stream offsets count
	// every message with its 5-byte header; nil socketRead: no estimate).
	socketRead func() int64 // bytes read from the socket so far
	consumed   int64        // bytes of the messages received so far
	lastStart  int64        // where the last message received began
	txStart    int64        // where the open transaction's Begin began
	skew       int64        // least socketRead - consumed seen: the bytes read before the stream
	skewKnown  bool
	sizes      [pacerSizes]int // of the last transactions, Begin to Commit
	nSizes     int

	// The linger (0: off).
	linger     time.Duration
	queued     func() int // bytes in the socket's receive queue (nil: no linger)
	lastAt     time.Time  // when the last message was received
	lastCommit time.Time  // when the last Commit was received
	txWindow   time.Time  // start of the window commits are counted in
	txCount    int        // commits in it so far
	txRate     float64    // commits per second in the last whole window
	lingering  bool       // waiting for more transactions, for up to linger
	lingerNew  bool       // a linger began: it needs a deadline of its own
}

const (
	// pacerWindow is how much time's worth of data a wake-up waits for.
	pacerWindow = time.Millisecond
	// pacerWait bounds one wait for the rate's mark: after it the mark
	// drops.
	pacerWait = 2 * time.Millisecond
	// pacerTxWait bounds one wait for the rest of an open transaction. Go
	// sleeps in whole milliseconds when it has nothing else to do, so this
	// is 1-2 ms in practice.
	pacerTxWait = time.Millisecond
	// pacerMaxLowat caps the mark.
	pacerMaxLowat = 64 << 10
	// pacerRateWindow is how often the rate, and so the mark, is revised.
	pacerRateWindow = 10 * time.Millisecond
	// pacerSizes is how many recent transactions the expected size of the
	// next one is taken from (their smallest).
	pacerSizes = 8
	// pacerTxRateWindow is how often the commit rate, which decides
	// whether to linger, is revised.
	pacerTxRateWindow = 200 * time.Millisecond
	// lingerMinTx is how many transactions a linger must be expected to
	// bring (LingerEngagesFrom). Measured with a 20 ms linger (make
	// bench's writers: four, each committing on its own schedule), where
	// fewer came (at 100 and 1,000 events/s: 10 and 100 transactions a
	// second) it cost latency and did not save CPU; from 5,000 events/s
	// (500 a second, 10 per linger) it halved the CPU per event. With 5 ms
	// (the command's default) it engages from 800 a second: at 1,000
	// (10,000 events/s, 5 per linger) it cut the CPU per event to 0.67 x
	// (docs/bench/steady/run-11).
	lingerMinTx = 4
)

// newReadPacer paces reads of c; socketRead, when not nil, counts the
// bytes read from c's socket (it must not count more than the stream's own
// bytes: not under TLS).
func newReadPacer(c net.Conn, socketRead func() int64, linger time.Duration) *readPacer {
	p := &readPacer{setLowat: lowatSetter(c), lowat: 1, rateLowat: 1, socketRead: socketRead}
	if linger > 0 && p.setLowat != nil && socketRead != nil {
		p.linger, p.queued = linger, queuedGetter(c)
	}
	return p
}

// wait is the longest a read should wait while the mark is raised, 0 when
// it is not (reads then wait for one byte).
func (p *readPacer) wait() time.Duration {
	switch {
	case p.lingering:
		return p.linger
	case p.lowat <= 1:
		return 0
	case p.inTx && !p.txStalled:
		return pacerTxWait
	default:
		return pacerWait
	}
}

// transaction notes whether a transaction is open after the message just
// read.
func (p *readPacer) transaction(open bool) {
	if open == p.inTx {
		return
	}
	if open {
		p.txStart = p.lastStart
	} else {
		p.sizes[p.nSizes%pacerSizes] = int(p.consumed - p.txStart)
		p.nSizes++
		p.countCommit()
		p.lingering = p.lingerDue()
		p.lingerNew = p.lingering
		p.lastCommit = p.lastAt
	}
	p.inTx, p.txStalled = open, false
	p.apply()
}

// lingerDue reports, at a Commit, whether to linger: the last one came
// less than the linger before (a stream that was idle is read at once),
// the rate of the last commit window brings at least lingerMinTx
// transactions per linger (else the linger costs latency, and wake-ups of
// its own, for little to batch), and nothing but a keepalive waits to be
// read (else it would hold back a transaction that is already here).
func (p *readPacer) lingerDue() bool {
	if p.linger <= 0 || p.queued == nil || p.lastCommit.IsZero() || p.lastAt.Sub(p.lastCommit) >= p.linger ||
		p.txRate < LingerEngagesFrom(p.linger) {
		return false
	}
	return p.readAhead()+int64(p.queued()) <= keepaliveBytes
}

// countCommit counts a Commit received at lastAt into the commit rate,
// revised once per pacerTxRateWindow.
func (p *readPacer) countCommit() {
	p.txCount++
	if p.txWindow.IsZero() {
		p.txWindow, p.txCount = p.lastAt, 0
		return
	}
	if elapsed := p.lastAt.Sub(p.txWindow); elapsed >= pacerTxRateWindow {
		p.txRate = float64(p.txCount) / elapsed.Seconds()
		p.txWindow, p.txCount = p.lastAt, 0
	}
}

// keepaliveBytes is the size of a keepalive, its header included.
const keepaliveBytes = 5 + 1 + 8 + 8 + 1

// readAhead is what pgconn read from the socket and has not returned yet.
func (p *readPacer) readAhead() int64 {
	if p.socketRead == nil || !p.skewKnown {
		return 0
	}
	return p.socketRead() - p.skew - p.consumed
}

// lingerStarted reports once that a linger began: the reader then sets a
// deadline for it, not keeping an earlier, shorter one.
func (p *readPacer) lingerStarted() bool {
	started := p.lingerNew
	p.lingerNew = false
	return started
}

// expectedRest is what of the open transaction is expected to be still on
// its way to the socket, 0 when there is no estimate.
func (p *readPacer) expectedRest() int {
	if p.socketRead == nil || p.nSizes == 0 || !p.skewKnown {
		return 0
	}
	size := p.sizes[0]
	for _, s := range p.sizes[1:min(p.nSizes, pacerSizes)] {
		size = min(size, s)
	}
	return int(p.txStart + int64(size) - (p.socketRead() - p.skew))
}

// received accounts a message of n bytes (its header included) read at now
// and revises the rate's mark once per pacerRateWindow. Any message but a
// keepalive ends a linger.
func (p *readPacer) received(n int, now time.Time, keepalive bool) {
	if p.lingering && !keepalive {
		p.lingering = false
		p.apply()
	}
	p.lastAt = now
	p.lastStart = p.consumed
	p.consumed += int64(n)
	if p.socketRead != nil {
		// The socket is ahead of the messages by what pgconn holds, and
		// by the bytes read before the stream; the least difference seen
		// is the latter (pgconn held nothing then).
		if d := p.socketRead() - p.consumed; !p.skewKnown || d < p.skew {
			p.skew, p.skewKnown = d, true
		}
	}
	p.windowBytes += n
	p.sinceRenew += n
	elapsed := now.Sub(p.windowStart)
	if elapsed < pacerRateWindow {
		return
	}
	perWindow := int(float64(p.windowBytes) * float64(pacerWindow) / float64(elapsed))
	p.windowStart, p.windowBytes = now, 0
	p.rateLowat = lowatFor(perWindow)
	p.apply()
}

// renewed notes that the read deadline was set again.
func (p *readPacer) renewed() { p.sinceRenew = 0 }

// timedOut notes that a read deadline passed; with nothing received since
// it was set, the stream has slowed down and reads stop waiting.
func (p *readPacer) timedOut() {
	if p.lingering {
		p.lingering = false // the linger is over: read what came
		p.apply()
		return
	}
	if p.sinceRenew != 0 {
		return
	}
	p.rateLowat = 1
	p.txStalled = p.inTx
	p.apply()
}

// stop lowers the mark to one byte when the reader returns: the session
// then reads small replies (the final status's, the end of the copy) that
// a raised mark would hold back until their deadline.
func (p *readPacer) stop() {
	p.lingering = false
	p.set(1)
}

// apply sets the mark the state calls for.
func (p *readPacer) apply() {
	want := p.rateLowat
	switch {
	case p.lingering:
		want = pacerMaxLowat
	case p.inTx && !p.txStalled:
		want = pacerMaxLowat
		if rest := p.expectedRest(); rest > 0 && p.rateLowat <= 1 {
			// A fast stream keeps the rate's mark: more transactions
			// follow this one at once.
			want = min(rest, pacerMaxLowat)
		}
	}
	p.set(want)
}

func (p *readPacer) set(lowat int) {
	if p.setLowat == nil || lowat == p.lowat {
		return
	}
	if err := p.setLowat(lowat); err != nil {
		p.setLowat = nil // not worth failing the stream over; lowat stays the kernel's
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
