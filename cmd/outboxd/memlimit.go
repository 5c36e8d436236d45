package main

import (
	"log/slog"
	"runtime/debug"
)

// memoryLimit is the Go runtime's soft memory limit for `run` when
// GOMEMLIMIT is not set: twice the in-flight byte cap plus 16 MiB for
// everything else (decode buffers, batches, the runtime). The in-flight caps
// bound the live heap; the limit stops the collector from letting the heap
// reach twice a momentary peak, which held peak RSS above 64 MiB during
// backlog drains. It is soft: a larger live heap is never an out-of-memory
// error, only more collection.
func memoryLimit(maxInFlightBytes int) int64 {
	return 2*int64(maxInFlightBytes) + 16<<20
}

// applyMemoryLimit sets memoryLimit unless the operator chose GOMEMLIMIT.
func applyMemoryLimit(getenv func(string) string, maxInFlightBytes int, log *slog.Logger) {
	if getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := memoryLimit(maxInFlightBytes)
	debug.SetMemoryLimit(limit)
	log.Debug("set the Go soft memory limit", "bytes", limit)
}
