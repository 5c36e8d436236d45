package readpace

import (
	"net"
	"time"

	"github.com/outboxd/outboxd/lib/rawio"
)

// Pacer paces the reads of one replication connection (see the package
// doc). The reader calls Wait before each read, Renewed when it set a new
// deadline, Received and Transaction for each message, TimedOut when a
// deadline passed, and Stop when it returns.
type Pacer struct {
	setLowat func(int) error // nil: no socket, or the kernel refused the option

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
	sizes      [sizes]int // of the last transactions, Begin to Commit
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
	shared     *Shared    // the process's streams lingering together (nil: this one alone)
}

const (
	// rateWindow is how much time's worth of data a wake-up waits for.
	rateWindow = time.Millisecond
	// rateWait bounds one wait for the rate's mark: after it the mark
	// drops.
	rateWait = 2 * time.Millisecond
	// TxWait bounds one wait for the rest of an open transaction. Go
	// sleeps in whole milliseconds when it has nothing else to do, so a
	// wait may last up to twice this.
	TxWait = time.Millisecond
	// maxLowat caps the mark.
	maxLowat = 64 << 10
	// rateRevision is how often the rate, and so the mark, is revised.
	rateRevision = 10 * time.Millisecond
	// sizes is how many recent transactions the expected size of the next
	// one is taken from (their smallest).
	sizes = 8
	// txRateRevision is how often the commit rate, which decides whether
	// to linger, is revised.
	txRateRevision = 200 * time.Millisecond
	// LingerMinTx is how many transactions a linger must be expected to
	// bring (EngagesFrom): with fewer, a linger adds latency, and wake-ups
	// of its own, for too little to batch to save CPU.
	LingerMinTx = 2
	// keepaliveBytes is the size of a keepalive, its header included.
	keepaliveBytes = 5 + 1 + 8 + 8 + 1
)

// EngagesFrom is the commit rate, in transactions a second, from which a
// read linger of d engages: where at least LingerMinTx are expected per
// linger. 0 when d is not positive (off).
func EngagesFrom(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(LingerMinTx) * float64(time.Second) / float64(d)
}

// New paces reads of c, through the TCP socket under it (rawio.SocketOf;
// without one the pacer does nothing). socketRead, when not nil, counts the
// bytes read from c's socket: it must not count more than the stream's own
// bytes (not under TLS). linger is the read linger, 0 for none; it needs
// socketRead and the socket.
func New(c net.Conn, socketRead func() int64, linger time.Duration) *Pacer {
	p := &Pacer{lowat: 1, rateLowat: 1, socketRead: socketRead}
	s := rawio.SocketOf(c)
	if s == nil {
		return p
	}
	p.setLowat = s.SetRecvLowat
	if linger > 0 && socketRead != nil {
		p.linger = linger
		p.queued = func() int {
			n, err := s.Queued()
			if err != nil {
				return maxLowat // read as a full queue: the linger it decides is skipped
			}
			return n
		}
	}
	return p
}

// Share makes p linger with the other pacers of s (see Shared) instead of
// alone. Call it before the first read.
func (p *Pacer) Share(s *Shared) { p.shared = s }

// Wait is the longest the next read should wait while the mark is raised,
// 0 when it is not (the read then waits for one byte, as long as the
// reader likes).
func (p *Pacer) Wait() time.Duration {
	switch {
	case p.lingering && p.shared != nil:
		return p.shared.untilTick(time.Now(), p.linger)
	case p.lingering:
		return p.linger
	case p.lowat <= 1:
		return 0
	case p.inTx && !p.txStalled:
		return TxWait
	default:
		return rateWait
	}
}

// Transaction notes whether a transaction is open after the message just
// received.
func (p *Pacer) Transaction(open bool) {
	if open == p.inTx {
		return
	}
	if open {
		p.txStart = p.lastStart
	} else {
		p.sizes[p.nSizes%sizes] = int(p.consumed - p.txStart)
		p.nSizes++
		p.countCommit()
		if p.shared != nil {
			p.shared.commit(p.lastAt)
		}
		p.lingering = p.lingerDue()
		p.lingerNew = p.lingering
		p.lastCommit = p.lastAt
	}
	p.inTx, p.txStalled = open, false
	p.apply()
}

// lingerDue reports, at a Commit, whether to linger: the last one came
// less than the linger before (a stream that was idle is read at once),
// the rate of the last commit window brings at least LingerMinTx
// transactions per linger (else the linger costs latency, and wake-ups of
// its own, for little to batch), and nothing but a keepalive waits to be
// read (else it would hold back a transaction that is already here).
func (p *Pacer) lingerDue() bool {
	if p.linger <= 0 || p.queued == nil || p.setLowat == nil {
		return false
	}
	if p.shared != nil {
		// The process's streams together: whatever this one's own rate,
		// the wake-up it waits for serves the others too.
		if !p.shared.engaged(p.linger) {
			return false
		}
	} else if p.lastCommit.IsZero() || p.lastAt.Sub(p.lastCommit) >= p.linger || p.txRate < EngagesFrom(p.linger) {
		return false
	}
	return p.readAhead()+int64(p.queued()) <= keepaliveBytes
}

// countCommit counts a Commit received at lastAt into the commit rate,
// revised once per txRateRevision.
func (p *Pacer) countCommit() {
	p.txCount++
	if p.txWindow.IsZero() {
		p.txWindow, p.txCount = p.lastAt, 0
		return
	}
	if elapsed := p.lastAt.Sub(p.txWindow); elapsed >= txRateRevision {
		p.txRate = float64(p.txCount) / elapsed.Seconds()
		p.txWindow, p.txCount = p.lastAt, 0
	}
}

// readAhead is what pgconn read from the socket and has not returned yet.
func (p *Pacer) readAhead() int64 {
	if p.socketRead == nil || !p.skewKnown {
		return 0
	}
	return p.socketRead() - p.skew - p.consumed
}

// LingerStarted reports once that a linger began: the reader then sets a
// deadline for it, not keeping an earlier, shorter one.
func (p *Pacer) LingerStarted() bool {
	started := p.lingerNew
	p.lingerNew = false
	return started
}

// expectedRest is what of the open transaction is expected to be still on
// its way to the socket, 0 when there is no estimate.
func (p *Pacer) expectedRest() int {
	if p.socketRead == nil || p.nSizes == 0 || !p.skewKnown {
		return 0
	}
	size := p.sizes[0]
	for _, s := range p.sizes[1:min(p.nSizes, sizes)] {
		size = min(size, s)
	}
	return int(p.txStart + int64(size) - (p.socketRead() - p.skew))
}

// Received accounts a message of n bytes (its header included) read at now
// and revises the rate's mark once per rateRevision. Any message but a
// keepalive ends a linger.
func (p *Pacer) Received(n int, now time.Time, keepalive bool) {
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
	if elapsed < rateRevision {
		return
	}
	perWindow := int(float64(p.windowBytes) * float64(rateWindow) / float64(elapsed))
	p.windowStart, p.windowBytes = now, 0
	p.rateLowat = lowatFor(perWindow)
	p.apply()
}

// Renewed notes that the read deadline was set again.
func (p *Pacer) Renewed() { p.sinceRenew = 0 }

// TimedOut notes that a read deadline passed; with nothing received since
// it was set, the stream has slowed down and reads stop waiting.
func (p *Pacer) TimedOut() {
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

// Stop lowers the mark to one byte when the reader returns: the session
// then reads small replies (the final status's, the end of the copy) that
// a raised mark would hold back until their deadline.
func (p *Pacer) Stop() {
	p.lingering = false
	p.set(1)
}

// apply sets the mark the state calls for.
func (p *Pacer) apply() {
	want := p.rateLowat
	switch {
	case p.lingering:
		want = maxLowat
	case p.inTx && !p.txStalled:
		want = maxLowat
		if rest := p.expectedRest(); rest > 0 && p.rateLowat <= 1 {
			// A fast stream keeps the rate's mark: more transactions
			// follow this one at once.
			want = min(rest, maxLowat)
		}
	}
	p.set(want)
}

// set sets the kernel's mark. A refusal turns pacing off for the
// connection, the linger with it: not worth failing the stream over, and
// the mark stays what the kernel has.
func (p *Pacer) set(lowat int) {
	if p.setLowat == nil || lowat == p.lowat {
		return
	}
	if err := p.setLowat(lowat); err != nil {
		p.setLowat, p.linger, p.lingering = nil, 0, false
		return
	}
	p.lowat = lowat
}

// lowatFor maps the bytes expected per rateWindow to a mark: a power of
// two (few changes), 1 below 4 KiB (too slow to be worth waiting for),
// capped at maxLowat.
func lowatFor(perWindow int) int {
	if perWindow < 4<<10 {
		return 1
	}
	m := 4 << 10
	for m*2 <= perWindow && m*2 <= maxLowat {
		m *= 2
	}
	return m
}
