package main

import (
	"context"
	"fmt"

	"github.com/outboxd/outboxd/bench/internal/host"
)

// idleRun is one launch of A or B: from launch until every pipeline
// streams, then nothing written for the idle window.
type idleRun struct {
	Mode      string `json:"mode"` // A (one process) or B (one a pipeline)
	Rep       int    `json:"rep"`
	Processes int    `json:"processes"`
	Pipelines int    `json:"pipelines"`
	// StreamingSeconds is from the first launch until GET /pipelines of
	// every process listed its pipelines all streaming (replication
	// started).
	StreamingSeconds float64 `json:"launch_to_all_streaming_seconds"`
	// CaughtUpSeconds is from the first launch until every walsender
	// decoded past a marker written once all streamed (caughtUp).
	CaughtUpSeconds float64 `json:"launch_to_all_caught_up_seconds"`
	// PeakRSSBytes is the processes' own peak resident sets (VmHWM)
	// summed, read at the idle window's end: start-up and idling.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// IdleSeconds is the window from the moment every walsender caught up;
	// the CPU figures are the processes' (summed) and their walsenders'
	// over it, and the machine's share of all cores busy.
	IdleSeconds             float64 `json:"idle_seconds"`
	IdleCPUSeconds          float64 `json:"idle_cpu_seconds"`
	IdleWalsenderCPUSeconds float64 `json:"idle_walsender_cpu_seconds"`
	IdleWakeups             int64   `json:"idle_wakeups"` // the processes' voluntary context switches
	MachineBusy             float64 `json:"machine_cpu_busy"`
	// IdleWALBytes is the WAL the server wrote over the window (autovacuum
	// after the loads, checkpoints): every walsender reads all of it.
	IdleWALBytes int64 `json:"idle_wal_bytes"`
}

// IdleCorePercent is the processes' idle CPU as a percentage of one core.
func (r idleRun) IdleCorePercent() float64 { return 100 * r.IdleCPUSeconds / r.IdleSeconds }

// idle measures g from its launch: the time until every pipeline streams
// and every walsender caught up, then its CPU over the idle window and its
// peak RSS.
func (b *bench) idle(ctx context.Context, g *group, rep int) (idleRun, error) {
	r := idleRun{Mode: g.name, Rep: rep, Processes: len(g.procs), Pipelines: len(g.ps)}
	at, err := awaitStreaming(ctx, g)
	if err != nil {
		return r, err
	}
	r.StreamingSeconds = at.Sub(g.launched).Seconds()
	if at, err = b.caughtUp(ctx, g); err != nil {
		return r, err
	}
	r.CaughtUpSeconds = at.Sub(g.launched).Seconds()
	walBefore, err := b.walPosition(ctx)
	if err != nil {
		return r, err
	}
	before, err := b.read(ctx, g)
	if err != nil {
		return r, err
	}
	if err := sleep(ctx, b.o.idle); err != nil {
		return r, err
	}
	after, err := b.read(ctx, g)
	if err != nil {
		return r, err
	}
	walAfter, err := b.walPosition(ctx)
	if err != nil {
		return r, err
	}
	r.IdleWALBytes = walAfter - walBefore
	r.IdleSeconds = after.Machine.At.Sub(before.Machine.At).Seconds()
	if err := g.exited(); err != nil {
		return r, fmt.Errorf("during the idle window: %w", err)
	}
	r.IdleCPUSeconds, r.IdleWalsenderCPUSeconds, r.MachineBusy = host.Used(before, after)
	r.IdleWakeups = after.Sleeps - before.Sleeps
	r.PeakRSSBytes, err = g.peakRSS()
	return r, err
}

// read reads the CPU time of g's processes and of the walsenders
// streaming its slots.
func (b *bench) read(ctx context.Context, g *group) (host.Reading, error) {
	ws, err := b.walsenders(ctx, g.slots())
	if err != nil {
		return host.Reading{}, err
	}
	return host.Read(g.pids(), ws), nil
}
