package cdc

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
		{10 << 20, pacerMaxLowat},
	}
	for _, tt := range tests {
		if got := lowatFor(tt.perWindow); got != tt.want {
			t.Errorf("lowatFor(%d) = %d, want %d", tt.perWindow, got, tt.want)
		}
	}
}

func TestReadPacer(t *testing.T) {
	var set []int
	p := &readPacer{lowat: 1, rateLowat: 1, setLowat: func(n int) error { set = append(set, n); return nil }}
	t0 := time.Unix(0, 0)
	p.windowStart = t0

	// 100 MB/s (a backlog drain): about 100 KB per millisecond, so the mark
	// goes to its cap once the rate window closes.
	for i := range 100 {
		p.received(10_000, t0.Add(time.Duration(i+1)*100*time.Microsecond))
	}
	if p.wait() != pacerWait || p.lowat != pacerMaxLowat {
		t.Fatalf("after a fast window: lowat %d, wait %v; want %d, %v", p.lowat, p.wait(), pacerMaxLowat, pacerWait)
	}
	// A deadline that passes while data still came in keeps the mark.
	p.renewed()
	p.received(100, t0.Add(10500*time.Microsecond))
	p.timedOut()
	if p.lowat != pacerMaxLowat {
		t.Fatalf("timeout after data: lowat %d, want it kept", p.lowat)
	}
	// A deadline with nothing received since it was set drops it at once.
	p.renewed()
	p.timedOut()
	if p.wait() != 0 {
		t.Fatalf("timeout without data: still pacing at %d", p.lowat)
	}
	// A slow stream (1 MB/s: 1 KB per millisecond) is not paced.
	p.windowStart = t0.Add(time.Second)
	for i := range 10 {
		p.received(1000, t0.Add(time.Second+time.Duration(i+1)*time.Millisecond))
	}
	if p.wait() != 0 {
		t.Fatalf("slow stream paced at %d", p.lowat)
	}
	if want := []int{pacerMaxLowat, 1}; len(set) != len(want) || set[0] != want[0] || set[1] != want[1] {
		t.Errorf("marks set %v, want %v", set, want)
	}
}

// A setter that fails (an option the platform refuses) turns pacing off
// rather than failing the stream.
func TestReadPacerSetterFailure(t *testing.T) {
	p := &readPacer{lowat: 1, rateLowat: 1, setLowat: func(int) error { return errors.New("refused") }}
	p.set(8 << 10)
	if p.wait() != 0 || p.setLowat != nil {
		t.Fatalf("after a failed set: lowat %d, setter kept %v", p.lowat, p.setLowat != nil)
	}
}

// An open transaction raises the mark whatever the rate: pgoutput sends a
// committed transaction back to back, so its rest is worth waiting for
// (briefly). Its Commit restores the rate's mark, so that an idle stream is
// read at its first byte.
func TestReadPacerTransaction(t *testing.T) {
	type step struct {
		name      string
		do        func(p *readPacer)
		wantLowat int
		wantWait  time.Duration
	}
	t0 := time.Unix(0, 0)
	fast := func(p *readPacer) { // a drain's rate: the mark goes to its cap
		p.windowStart = t0
		for i := range 100 {
			p.received(10_000, t0.Add(time.Duration(i+1)*100*time.Microsecond))
		}
	}
	begin := func(p *readPacer) { p.transaction(true) }
	commit := func(p *readPacer) { p.transaction(false) }
	quiet := func(p *readPacer) { p.renewed(); p.timedOut() }
	tests := []struct {
		name  string
		steps []step
	}{
		{"slow stream", []step{
			{"idle", func(*readPacer) {}, 1, 0},
			{"begin", begin, pacerMaxLowat, pacerTxWait},
			{"begin again", begin, pacerMaxLowat, pacerTxWait},
			{"commit", commit, 1, 0},
		}},
		{"transaction goes quiet", []step{
			{"begin", begin, pacerMaxLowat, pacerTxWait},
			{"deadline with data", func(p *readPacer) { p.renewed(); p.received(100, t0); p.timedOut() }, pacerMaxLowat, pacerTxWait},
			{"deadline without data", quiet, 1, 0},
			{"commit", commit, 1, 0},
			{"next begin waits again", begin, pacerMaxLowat, pacerTxWait},
		}},
		{"fast stream", []step{
			{"drain rate", fast, pacerMaxLowat, pacerWait},
			{"begin", begin, pacerMaxLowat, pacerTxWait},
			{"commit keeps the rate's mark", commit, pacerMaxLowat, pacerWait},
			{"begin, then the stream goes quiet", func(p *readPacer) { begin(p); quiet(p) }, 1, 0},
			{"commit", commit, 1, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var kernel int
			p := &readPacer{lowat: 1, rateLowat: 1, setLowat: func(n int) error { kernel = n; return nil }}
			for _, s := range tt.steps {
				s.do(p)
				if p.lowat != s.wantLowat || p.wait() != s.wantWait {
					t.Fatalf("%s: lowat %d, wait %v; want %d, %v", s.name, p.lowat, p.wait(), s.wantLowat, s.wantWait)
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
func TestReadPacerExpectedRest(t *testing.T) {
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
	tx := func(p *readPacer, sock *int64, n, readWithBegin int) int {
		*sock += begin + int64(readWithBegin*insert)
		p.received(begin, t0)
		p.transaction(true)
		mark := p.lowat
		*sock += int64((n-readWithBegin)*insert + commit)
		for range n {
			p.received(insert, t0)
		}
		p.received(commit, t0)
		p.transaction(false)
		return mark
	}
	tests := []struct {
		name          string
		tls           bool
		history       []int // inserts per earlier transaction
		inserts, with int
		want          int
	}{
		{"no history yet", false, nil, 10, 0, pacerMaxLowat},
		{"alike transactions, Begin read alone", false, []int{10, 10}, 10, 0, txSize - begin},
		{"alike transactions, Begin read with two inserts", false, []int{10, 10}, 10, 2, txSize - begin - 2*insert},
		{"the smallest recent one counts", false, []int{10, 4, 10}, 10, 0, begin + 4*insert + commit - begin},
		{"TLS: no count of the stream's own bytes", true, []int{10, 10}, 10, 0, pacerMaxLowat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := int64(preStream)
			var socketRead func() int64
			if !tt.tls {
				socketRead = func() int64 { return sock }
			}
			p := &readPacer{lowat: 1, rateLowat: 1, setLowat: func(int) error { return nil }, socketRead: socketRead}
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
