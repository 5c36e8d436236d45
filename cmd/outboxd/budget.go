package main

import (
	"log/slog"
	"math"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/pump"
)

// memoryLimitRatio is the share of a container's memory limit that run
// sets as the Go runtime's limit when GOMEMLIMIT is not set: the garbage
// collector works harder as the heap nears it, before the kernel kills the
// process at the container's.
const memoryLimitRatio = 0.9

// inFlightBudget sets the Go runtime's memory limit from the container's
// (cgroup) when GOMEMLIMIT does not set one, and returns the process's
// in-flight budget (config.InFlightBudget), saying where it came from.
func inFlightBudget(cfg *config.Config, log *slog.Logger) *pump.Budget {
	limit, err := memlimit.Set(memlimit.WithRatio(memoryLimitRatio), memlimit.WithLogger(slog.New(slog.DiscardHandler)))
	source := "none"
	switch {
	case err != nil:
		log.Warn("reading the container's memory limit: the Go runtime's stays as it is", "err", err)
	case os.Getenv("GOMEMLIMIT") != "":
		source = "GOMEMLIMIT"
	case limit > 0 && limit < math.MaxInt64:
		source = "container (90 %, set as GOMEMLIMIT)"
	}
	b := cfg.InFlightBudget(limit)
	st := b.Stats()
	attrs := []any{"bytes", st.MaxBytes, "records", st.MaxRecords, "memory_limit_from", source}
	if source != "none" {
		attrs = append(attrs, "memory_limit_bytes", limit)
	}
	log.Info("in-flight budget of the process, shared by its pipelines", attrs...)
	return b
}
