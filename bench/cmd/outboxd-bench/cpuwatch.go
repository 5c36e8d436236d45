package main

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxd/outboxd/bench/internal/host"
	"github.com/outboxd/outboxd/harness/procstat"
)

// cpuWatch samples, during a drain, the CPU time of the slot's walsender
// (the server process that decodes the WAL for the slot) and how busy the
// whole machine is: the evidence of what bounds each system's drain.
type cpuWatch struct {
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	walsender map[int]float64 // pid -> CPU seconds, last sample
	machine   []host.CPUSample
}

// watchCPU starts sampling every 100 ms until finish. slot "" watches no
// walsender (the relay has none).
func (e *env) watchCPU(ctx context.Context, db, slot string) *cpuWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &cpuWatch{start: time.Now(), cancel: cancel, done: make(chan struct{}), walsender: map[int]float64{}}
	if s, ok := host.ReadCPU(); ok {
		w.machine = append(w.machine, s)
	}
	go func() {
		defer close(w.done)
		var conn *pgx.Conn
		if slot != "" {
			if c, err := pgx.Connect(ctx, e.DatabaseURL(db)); err == nil {
				conn = c
				defer conn.Close(context.WithoutCancel(ctx))
			}
		}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			var pid int
			if conn != nil {
				_ = conn.QueryRow(ctx, `SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = $1 AND database = $2`, slot, db).Scan(&pid)
			}
			s, ok := host.ReadCPU()
			w.mu.Lock()
			if pid != 0 {
				if cpu, err := procstat.CPUSeconds(pid); err == nil && cpu > 0 {
					w.walsender[pid] = cpu
				}
			}
			if ok {
				w.machine = append(w.machine, s)
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// firstPid is a walsender pid seen so far, 0 before one was.
func (w *cpuWatch) firstPid() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for pid := range w.walsender {
		return pid
	}
	return 0
}

// finish stops sampling and returns the walsender's CPU seconds (it starts
// when the system connects) and the fraction of the machine's CPU time that
// was busy between from and to after the watch began (the drain itself, not
// the system's start-up or shutdown).
func (w *cpuWatch) finish(from, to time.Duration) (walsenderCPU, machineBusy float64) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cpu := range w.walsender {
		walsenderCPU += cpu
	}
	begin, end := w.start.Add(from), w.start.Add(to)
	var first, last host.CPUSample
	for _, s := range w.machine {
		if s.At.After(end) {
			break
		}
		if first.At.IsZero() || !s.At.After(begin) {
			first = s
		}
		last = s
	}
	return walsenderCPU, host.BusyBetween(first, last)
}
