// Package host is the machine a benchmark runs on: what it is (for the
// report), how busy its cores are, and what CPU the processes under test
// used between two moments. It is shared by bench/cmd/outboxd-bench and
// bench/cmd/fleet-bench.
package host

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Describe is the machine as a report states it: cores, CPU model, memory,
// Go version and platform.
func Describe() map[string]string {
	m := map[string]string{"cpus": strconv.Itoa(runtime.NumCPU()), "go": runtime.Version(), "os": runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				m["cpu"] = strings.TrimSpace(l[strings.Index(l, ":")+1:])
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m["memory"] = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	return m
}

// Line is d (Describe's) as a report's one line: cpus, cpu, memory.
func Line(d map[string]string) string {
	var parts []string
	for _, k := range []string{"cpus", "cpu", "memory"} {
		if v := d[k]; v != "" {
			parts = append(parts, k+" "+v)
		}
	}
	return strings.Join(parts, ", ")
}
