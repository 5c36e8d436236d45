package host

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/harness/procstat"
)

// ClusterCPU is the CPU seconds the cluster in dir used so far: its
// postmaster's and its live children's, and, from the postmaster's
// cutime and cstime, its children that exited (the writers' backends end
// with their connections, before the last reading).
func ClusterCPU(dir string) float64 {
	all, _ := ClusterPIDs(dir)
	if len(all) == 0 {
		return 0
	}
	var sum float64
	for _, pid := range all {
		if cpu, err := procstat.CPUSeconds(pid); err == nil {
			sum += cpu
		}
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(all[0]), "stat"))
	if err != nil {
		return sum
	}
	s := string(stat)
	// After the command: state is field 3, so cutime (16) and cstime (17)
	// are the 14th and 15th of these.
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) > 14 {
		cu, _ := strconv.ParseFloat(fields[13], 64)
		cs, _ := strconv.ParseFloat(fields[14], 64)
		sum += (cu + cs) / clockTicks
	}
	return sum
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times (100 on every Linux this runs on).
const clockTicks = 100

// ClusterPIDs lists the processes of the cluster in dir (its postmaster
// and the postmaster's children), and its walsenders among them.
func ClusterPIDs(dir string) (all, walsenders []int) {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return nil, nil
	}
	pm, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		return nil, nil
	}
	all = append(all, pm)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command (in parentheses, which may hold
		// spaces): state, then the parent's pid.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(pm) {
			continue
		}
		all = append(all, pid)
		if cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(cmd), "walsender") {
			walsenders = append(walsenders, pid)
		}
	}
	return all, walsenders
}
