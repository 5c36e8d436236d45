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
