package cdc

import (
	"testing"
	"time"
)

// LingerEngagesFrom is what --help and the bench report quote for the
// command's default linger and the longest one.
func TestLingerEngagesFrom(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		linger time.Duration
		want   float64
	}{
		{DefaultReadLinger, 400},
		{20 * time.Millisecond, 100},
		{MaxReadLinger, 20},
		{0, 0},
		{-time.Millisecond, 0},
	} {
		if got := LingerEngagesFrom(tt.linger); got != tt.want {
			t.Errorf("LingerEngagesFrom(%v) = %v, want %v", tt.linger, got, tt.want)
		}
	}
}
