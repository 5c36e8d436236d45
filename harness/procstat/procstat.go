// Package procstat reads what a live Linux process has used so far: its
// own peak resident set and how often its threads went to sleep (from
// /proc), and its CPU time (from its CPU-time clock). It keeps no state;
// each call reads once.
//
// The peak is the process's own high-water mark (VmHWM). The ru_maxrss that
// wait4 reports for a child is not: Linux carries the parent's mark over to
// a child that execs after a vfork (as os/exec starts processes).
package procstat

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PeakRSS returns the peak resident set size (VmHWM) of process pid, in
// bytes.
func PeakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the peak RSS of process %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("reading the peak RSS of process %d: VmHWM %q: %w", pid, f[1], err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("reading the peak RSS of process %d: no VmHWM in /proc/%d/status", pid, pid)
}

// CPUSeconds returns the CPU time (user plus system) process pid has used
// so far, all its threads counted, those that exited too.
//
// It reads the process's CPU-time clock (clock_getcpuclockid(3)), which
// the scheduler keeps in nanoseconds. /proc/PID/stat gives the same time
// in 10 ms ticks, too coarse for CPU per event at low rates: over a 10 s
// run at 10 events/s (100 events) one tick is 100 µs per event.
func CPUSeconds(pid int) (float64, error) {
	ns, err := cpuClock(pid)
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	return float64(ns) / 1e9, nil
}

// Sleeps returns how many times the threads of process pid have given up
// the CPU to wait (their voluntary context switches, summed over
// /proc/PID/task): each is a sleep that a wake-up ends, so the difference
// between two readings counts the process's wake-ups. A thread that exited
// meanwhile takes its count with it.
func Sleeps(pid int) (int64, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("reading the context switches of process %d: no threads in /proc/%d/task", pid, pid)
	}
	var n int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("reading the context switches of process %d: %q: %w", pid, line, err)
				}
				n += c
			}
		}
	}
	return n, nil
}
