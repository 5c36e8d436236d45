// Package procstat reads what a live Linux process has used so far, from
// /proc: its own peak resident set, its CPU time and how often its threads
// went to sleep. It keeps no state; each call reads /proc once.
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

// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

// CPUSeconds returns the user plus system CPU time process pid has used.
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// after its closing parenthesis, where state is field 3 of proc(5).
	s := string(b)
	i := strings.LastIndex(s, ")")
	if i < 0 || i+2 > len(s) {
		return 0, fmt.Errorf("reading the CPU time of process %d: malformed /proc/%d/stat", pid, pid)
	}
	f := strings.Fields(s[i+2:])
	if len(f) <= 12 {
		return 0, fmt.Errorf("reading the CPU time of process %d: %d fields in /proc/%d/stat", pid, len(f), pid)
	}
	var ticks float64
	for _, v := range f[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading the CPU time of process %d: %q: %w", pid, v, err)
		}
		ticks += float64(n)
	}
	return ticks / userHZ, nil
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
