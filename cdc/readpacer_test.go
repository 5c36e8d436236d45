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
	p := &readPacer{lowat: 1, setLowat: func(n int) error { set = append(set, n); return nil }}
	t0 := time.Unix(0, 0)
	p.windowStart = t0

	// 100 MB/s (a backlog drain): about 100 KB per millisecond, so the mark
	// goes to its cap once the rate window closes.
	for i := range 100 {
		p.received(10_000, t0.Add(time.Duration(i+1)*100*time.Microsecond))
	}
	if !p.pacing() || p.lowat != pacerMaxLowat {
		t.Fatalf("after a fast window: lowat %d, pacing %v; want %d", p.lowat, p.pacing(), pacerMaxLowat)
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
	if p.pacing() {
		t.Fatalf("timeout without data: still pacing at %d", p.lowat)
	}
	// A slow stream (1 MB/s: 1 KB per millisecond) is not paced.
	p.windowStart = t0.Add(time.Second)
	for i := range 10 {
		p.received(1000, t0.Add(time.Second+time.Duration(i+1)*time.Millisecond))
	}
	if p.pacing() {
		t.Fatalf("slow stream paced at %d", p.lowat)
	}
	if want := []int{pacerMaxLowat, 1}; len(set) != len(want) || set[0] != want[0] || set[1] != want[1] {
		t.Errorf("marks set %v, want %v", set, want)
	}
}

// A setter that fails (an option the platform refuses) turns pacing off
// rather than failing the stream.
func TestReadPacerSetterFailure(t *testing.T) {
	p := &readPacer{lowat: 1, setLowat: func(int) error { return errors.New("refused") }}
	p.set(8 << 10)
	if p.pacing() || p.setLowat != nil {
		t.Fatalf("after a failed set: lowat %d, setter kept %v", p.lowat, p.setLowat != nil)
	}
}
