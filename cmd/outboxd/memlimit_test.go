package main

import (
	"io"
	"log/slog"
	"runtime/debug"
	"testing"
)

func TestApplyMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name      string
		gomem     string
		inFlight  int
		wantLimit int64
	}{
		{"default caps", "", 16 << 20, 48 << 20},
		{"raised cap", "", 64 << 20, 144 << 20},
		{"GOMEMLIMIT wins", "1GiB", 16 << 20, 7 << 20}, // 7 MiB: the value set before, untouched
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetMemoryLimit(7 << 20)
			applyMemoryLimit(func(k string) string {
				if k == "GOMEMLIMIT" {
					return tt.gomem
				}
				return ""
			}, tt.inFlight, log)
			if got := debug.SetMemoryLimit(-1); got != tt.wantLimit {
				t.Errorf("memory limit = %d, want %d", got, tt.wantLimit)
			}
		})
	}
}
