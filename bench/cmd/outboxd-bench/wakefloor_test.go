package main

import (
	"slices"
	"testing"
)

// Regression: the floor doubled the cost of one wake-up after a long rest,
// overstating it (the acknowledgment's wake-up comes soon after the
// arrival's and costs less); a measured pair now takes precedence.
func TestFloorUsPerEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    wakeFloor
		want float64
	}{
		{"the measured pair, a tenth per event", wakeFloor{UsPerWakeup: 140, UsPerWakeupRaw: 85, UsPerPairRaw: 92}, 9.2},
		{"before pairs were measured: twice the raw single", wakeFloor{UsPerWakeup: 140, UsPerWakeupRaw: 85}, 17},
		{"before raw reads were measured: twice the net package's", wakeFloor{UsPerWakeup: 140}, 28},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.w.FloorUsPerEvent(); got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Errorf("FloorUsPerEvent() = %v, want %v", got, tc.want)
			}
		})
	}
}

// Regression: a steady run at 10 events/s measured its floor with 300
// wake-ups at one a second, five times for each of three kinds: over an
// hour. Only rates from minFloorRate up are measured.
func TestFloorRatesSkipSlowRates(t *testing.T) {
	got := floorRates([]int{10, 100, 1000, 5000, 999, 20000})
	if want := []int{1000, 5000, 20000}; !slices.Equal(got, want) {
		t.Errorf("floorRates = %v, want %v", got, want)
	}
}
