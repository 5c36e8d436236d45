package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
	machine   []cpuSample
}

type cpuSample struct {
	at          time.Time
	busy, total uint64 // jiffies over all CPUs, from /proc/stat
}

// watchCPU starts sampling every 100 ms until finish. slot "" watches no
// walsender (the relay has none).
func (e *env) watchCPU(ctx context.Context, db, slot string) *cpuWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &cpuWatch{start: time.Now(), cancel: cancel, done: make(chan struct{}), walsender: map[int]float64{}}
	if s, ok := machineCPU(); ok {
		w.machine = append(w.machine, s)
	}
	go func() {
		defer close(w.done)
		var conn *pgx.Conn
		if slot != "" {
			if c, err := pgx.Connect(ctx, e.dbURL(db)); err == nil {
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
			s, ok := machineCPU()
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
	var first, last cpuSample
	for _, s := range w.machine {
		if s.at.After(end) {
			break
		}
		if first.at.IsZero() || !s.at.After(begin) {
			first = s
		}
		last = s
	}
	if last.total > first.total {
		machineBusy = float64(last.busy-first.busy) / float64(last.total-first.total)
	}
	return walsenderCPU, machineBusy
}

// machineCPU reads the aggregate "cpu" line of /proc/stat.
func machineCPU() (cpuSample, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return cpuSample{}, false
	}
	s := cpuSample{at: time.Now()}
	for i, v := range f[1:] {
		if i >= 8 { // guest time is already counted in user
			break
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuSample{}, false
		}
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	return s, true
}
