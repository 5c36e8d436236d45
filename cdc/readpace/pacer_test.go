package readpace

import (
	"errors"
	"testing"
	"time"
)

func TestLowatFor(t *testing.T) {
	tests := []struct{ perWindow, want int }{
		{0, 1},
		{4<<10 - 1, 1},
		{4 << 10, 4 << 10},
		{12 << 10, 8 << 10},
		{64 << 10, 64 << 10},
		{10 << 20, maxLowat},
	}
	for _, tt := range tests {
		if got := lowatFor(tt.perWindow); got != tt.want {
			t.Errorf("lowatFor(%d) = %d, want %d", tt.perWindow, got, tt.want)
		}
	}
}

func TestPacer(t *testing.T) {
	var set []int
	p := &Pacer{lowat: 1, rateLowat: 1, setLowat: func(n int) error { set = append(set, n); return nil }}
	t0 := time.Unix(0, 0)
	p.windowStart = t0

	// 100 MB/s (a backlog drain): about 100 KB per millisecond, so the mark
	// goes to its cap once the rate window closes.
	for i := range 100 {
		p.Received(10_000, t0.Add(time.Duration(i+1)*100*time.Microsecond), false)
	}
	if p.Wait() != rateWait || p.lowat != maxLowat {
		t.Fatalf("after a fast window: lowat %d, wait %v; want %d, %v", p.lowat, p.Wait(), maxLowat, rateWait)
	}
	// A deadline that passes while data still came in keeps the mark.
	p.Renewed()
	p.Received(100, t0.Add(10500*time.Microsecond), false)
	p.TimedOut()
	if p.lowat != maxLowat {
		t.Fatalf("timeout after data: lowat %d, want it kept", p.lowat)
	}
	// A deadline with nothing received since it was set drops it at once.
	p.Renewed()
	p.TimedOut()
	if p.Wait() != 0 {
		t.Fatalf("timeout without data: still pacing at %d", p.lowat)
	}
	// A slow stream (1 MB/s: 1 KB per millisecond) is not paced.
	p.windowStart = t0.Add(time.Second)
	for i := range 10 {
		p.Received(1000, t0.Add(time.Second+time.Duration(i+1)*time.Millisecond), false)
	}
	if p.Wait() != 0 {
		t.Fatalf("slow stream paced at %d", p.lowat)
	}
	if want := []int{maxLowat, 1}; len(set) != len(want) || set[0] != want[0] || set[1] != want[1] {
		t.Errorf("marks set %v, want %v", set, want)
	}
}

// A setter that fails (an option the platform refuses) turns pacing off,
// the linger with it, rather than failing the stream.
func TestPacerSetterFailure(t *testing.T) {
	p := &Pacer{lowat: 1, rateLowat: 1, setLowat: func(int) error { return errors.New("refused") },
		linger: 20 * time.Millisecond, queued: func() int { return 0 }}
	p.set(8 << 10)
	if p.Wait() != 0 || p.setLowat != nil || p.linger != 0 {
		t.Fatalf("after a failed set: lowat %d, setter kept %v, linger %v", p.lowat, p.setLowat != nil, p.linger)
	}
}

// An open transaction raises the mark whatever the rate: pgoutput sends a
// committed transaction back to back, so its rest is worth waiting for
// (briefly). Its Commit restores the rate's mark, so that an idle stream is
// read at its first byte.
func TestPacerTransaction(t *testing.T) {
	type step struct {
		name      string
		do        func(p *Pacer)
		wantLowat int
		wantWait  time.Duration
	}
	t0 := time.Unix(0, 0)
	fast := func(p *Pacer) { // a drain's rate: the mark goes to its cap
		p.windowStart = t0
		for i := range 100 {
			p.Received(10_000, t0.Add(time.Duration(i+1)*100*time.Microsecond), false)
		}
	}
	begin := func(p *Pacer) { p.Transaction(true) }
	commit := func(p *Pacer) { p.Transaction(false) }
	quiet := func(p *Pacer) { p.Renewed(); p.TimedOut() }
	tests := []struct {
		name  string
		steps []step
	}{
		{"slow stream", []step{
			{"idle", func(*Pacer) {}, 1, 0},
			{"begin", begin, maxLowat, TxWait},
			{"begin again", begin, maxLowat, TxWait},
			{"commit", commit, 1, 0},
		}},
		{"transaction goes quiet", []step{
			{"begin", begin, maxLowat, TxWait},
			{"deadline with data", func(p *Pacer) { p.Renewed(); p.Received(100, t0, false); p.TimedOut() }, maxLowat, TxWait},
			{"deadline without data", quiet, 1, 0},
			{"commit", commit, 1, 0},
			{"next begin waits again", begin, maxLowat, TxWait},
		}},
		{"fast stream", []step{
			{"drain rate", fast, maxLowat, rateWait},
			{"begin", begin, maxLowat, TxWait},
			{"commit keeps the rate's mark", commit, maxLowat, rateWait},
			{"begin, then the stream goes quiet", func(p *Pacer) { begin(p); quiet(p) }, 1, 0},
			{"commit", commit, 1, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var kernel int
			p := &Pacer{lowat: 1, rateLowat: 1, setLowat: func(n int) error { kernel = n; return nil }}
			for _, s := range tt.steps {
				s.do(p)
				if p.lowat != s.wantLowat || p.Wait() != s.wantWait {
					t.Fatalf("%s: lowat %d, wait %v; want %d, %v", s.name, p.lowat, p.Wait(), s.wantLowat, s.wantWait)
				}
				if kernel != 0 && kernel != p.lowat {
					t.Fatalf("%s: kernel mark %d, pacer thinks %d", s.name, kernel, p.lowat)
				}
			}
		})
	}
}

// Inside a transaction the mark is what the rest of it is expected to
// weigh: the smallest recent transaction less what the socket gave
// already, counting what pgconn read ahead and not what came before the
// stream. Without that count (TLS) or a history it stays at its cap.
func TestPacerExpectedRest(t *testing.T) {
	const (
		preStream = 100 // startup and replication set-up, read before the stream
		begin     = 50
		insert    = 330
		commit    = 30
		txSize    = begin + 10*insert + commit
	)
	t0 := time.Unix(0, 0)
	// tx sends one transaction of n inserts; readWithBegin is how many of
	// its inserts pgconn read from the socket together with the Begin. It
	// returns the mark set right after the Begin.
	tx := func(p *Pacer, sock *int64, n, readWithBegin int) int {
		*sock += begin + int64(readWithBegin*insert)
		p.Received(begin, t0, false)
		p.Transaction(true)
		mark := p.lowat
		*sock += int64((n-readWithBegin)*insert + commit)
		for range n {
			p.Received(insert, t0, false)
		}
		p.Received(commit, t0, false)
		p.Transaction(false)
		return mark
	}
	tests := []struct {
		name          string
		tls           bool
		history       []int // inserts per earlier transaction
		inserts, with int
		want          int
	}{
		{"no history yet", false, nil, 10, 0, maxLowat},
		{"alike transactions, Begin read alone", false, []int{10, 10}, 10, 0, txSize - begin},
		{"alike transactions, Begin read with two inserts", false, []int{10, 10}, 10, 2, txSize - begin - 2*insert},
		{"the smallest recent one counts", false, []int{10, 4, 10}, 10, 0, begin + 4*insert + commit - begin},
		{"TLS: no count of the stream's own bytes", true, []int{10, 10}, 10, 0, maxLowat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := int64(preStream)
			var socketRead func() int64
			if !tt.tls {
				socketRead = func() int64 { return sock }
			}
			p := &Pacer{lowat: 1, rateLowat: 1, setLowat: func(int) error { return nil }, socketRead: socketRead}
			for _, n := range tt.history {
				tx(p, &sock, n, 0)
			}
			if got := tx(p, &sock, tt.inserts, tt.with); got != tt.want {
				t.Errorf("mark after the Begin: %d, want %d", got, tt.want)
			}
			if p.lowat != 1 {
				t.Errorf("after the Commit: mark %d, want 1", p.lowat)
			}
		})
	}
}

// The read linger: at a Commit that came less than the linger after the one
// before, in a stream fast enough to bring LingerMinTx transactions per
// linger, with at most a keepalive left to read, the mark goes to its cap
// for the linger; a keepalive read meanwhile leaves it, any other message
// or the deadline ends it, and a slower or bursty stream is read at once.
func TestPacerLinger(t *testing.T) {
	const linger = 20 * time.Millisecond
	t0 := time.Unix(0, 0)
	type state struct {
		at     time.Duration // since t0
		sock   int64         // the stream's bytes read from the socket
		queued int           // in the socket's queue
		ahead  int64         // read by pgconn beyond the stream's bytes, not yet returned
	}
	type step struct {
		name string
		do   func(p *Pacer, s *state)
		// want: lingering (the mark at its cap, wait the linger) or not.
		lingering bool
		started   bool // lingerStarted reports a new linger
	}
	// tx reads a transaction (Begin, one insert, Commit) gap after the last.
	tx := func(gap time.Duration) func(p *Pacer, s *state) {
		return func(p *Pacer, s *state) {
			s.at += gap
			for i, n := range []int{50, 300, 30} {
				s.sock += int64(n)
				p.Received(n, t0.Add(s.at), false)
				p.Transaction(i < 2)
			}
		}
	}
	// steady reads n transactions gap apart.
	steady := func(n int, gap time.Duration) func(p *Pacer, s *state) {
		return func(p *Pacer, s *state) {
			for range n {
				tx(gap)(p, s)
			}
		}
	}
	// bursts reads n bursts of four transactions a millisecond apart, the
	// bursts 400 ms apart: 10 transactions a second, some close together.
	bursts := func(n int) func(p *Pacer, s *state) {
		return func(p *Pacer, s *state) {
			for range n {
				tx(400*time.Millisecond)(p, s)
				steady(3, time.Millisecond)(p, s)
			}
		}
	}
	fast := steady(300, time.Millisecond) // 1,000 transactions a second: 20 per linger
	// gapAt is the gap between transactions that come perSecond a second.
	gapAt := func(perSecond float64) time.Duration { return time.Duration(float64(time.Second) / perSecond) }
	keepalive := func(p *Pacer, s *state) {
		s.sock += keepaliveBytes
		p.Received(keepaliveBytes, t0.Add(s.at), true)
	}
	deadline := func(p *Pacer, _ *state) { p.Renewed(); p.TimedOut() }
	tests := []struct {
		name   string
		linger time.Duration
		steps  []step
	}{
		{"steady stream", linger, []step{
			{"first transactions: no rate yet", steady(2, time.Millisecond), false, false},
			{"a fast stream", fast, true, true},
			{"a keepalive meanwhile", keepalive, true, false},
			{"the deadline ends it", deadline, false, false},
			{"the next transaction lingers again", tx(time.Millisecond), true, true},
			{"a transaction's Begin ends it", func(p *Pacer, s *state) { s.sock += 50; p.Received(50, t0.Add(s.at), false); p.Transaction(true) }, false, false},
			{"its Commit lingers again", func(p *Pacer, s *state) { s.sock += 30; p.Received(30, t0.Add(s.at), false); p.Transaction(false) }, true, true},
			{"deadline", deadline, false, false},
			{"a transaction a linger after the last: read at once", tx(linger), false, false},
		}},
		{"slow stream", linger, []step{
			{"a transaction every 15 ms: 1.3 per linger", steady(50, 15*time.Millisecond), false, false},
		}},
		{"bursty slow stream", linger, []step{
			{"bursts of four", bursts(5), false, false},
		}},
		{"something already waits", linger, []step{
			{"a fast stream", fast, true, true},
			{"deadline", deadline, false, false},
			{"a keepalive queued: lingers", func(p *Pacer, s *state) { s.queued = keepaliveBytes; tx(time.Millisecond)(p, s) }, true, true},
			{"deadline again", deadline, false, false},
			{"more than a keepalive queued", func(p *Pacer, s *state) { s.queued = keepaliveBytes + 1; tx(time.Millisecond)(p, s) }, false, false},
			{"read ahead by pgconn", func(p *Pacer, s *state) { s.queued, s.ahead = 0, 51; tx(time.Millisecond)(p, s) }, false, false},
		}},
		// EngagesFrom states the rule (for --help and the bench
		// report): a stream a tenth below that rate is read at once, a
		// tenth above it lingers.
		{"a tenth below the rate it engages from", linger, []step{
			{"steady", steady(300, gapAt(0.9*EngagesFrom(linger))), false, false},
		}},
		{"a tenth above the rate it engages from", linger, []step{
			{"steady", steady(300, gapAt(1.1*EngagesFrom(linger))), true, true},
		}},
		{"off", 0, []step{
			{"a fast stream", fast, false, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := state{sock: 100} // read before the stream
			p := &Pacer{lowat: 1, rateLowat: 1, setLowat: func(int) error { return nil }, linger: tt.linger,
				socketRead: func() int64 { return s.sock + s.ahead },
				queued:     func() int { return s.queued }}
			p.windowStart = t0
			for _, st := range tt.steps {
				st.do(p, &s)
				started := p.LingerStarted()
				lingering := p.lowat == maxLowat && p.Wait() == tt.linger && tt.linger > 0
				if lingering != st.lingering || started != st.started {
					t.Fatalf("%s: lingering %v (mark %d, wait %v), started %v; want %v, %v", st.name, lingering, p.lowat, p.Wait(), started, st.lingering, st.started)
				}
				if p.LingerStarted() {
					t.Fatalf("%s: lingerStarted reported the same linger twice", st.name)
				}
			}
		})
	}
}

func TestEngagesFrom(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		linger time.Duration
		want   float64
	}{
		{5 * time.Millisecond, 400},
		{20 * time.Millisecond, 100},
		{100 * time.Millisecond, 20},
		{0, 0},
		{-time.Millisecond, 0},
	} {
		if got := EngagesFrom(tt.linger); got != tt.want {
			t.Errorf("EngagesFrom(%v) = %v, want %v", tt.linger, got, tt.want)
		}
	}
}
