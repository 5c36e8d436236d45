package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// walsenderPerf records the slot's walsender with perf for d, one second
// into the drain, and returns where its CPU went: by binary (kernel,
// postgres, pgoutput) and the top symbols. It is the profile evidence of
// what the decoding side spends its core on; without perf (or permission)
// it says so instead.
func walsenderPerf(ctx context.Context, w *cpuWatch, d time.Duration) <-chan string {
	out := make(chan string, 1)
	go func() {
		out <- recordWalsender(ctx, w, d)
	}()
	return out
}

func recordWalsender(ctx context.Context, w *cpuWatch, d time.Duration) string {
	if _, err := exec.LookPath("perf"); err != nil {
		return "perf: not installed"
	}
	var pid int
	for range 200 {
		if pid = w.firstPid(); pid != 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pid == 0 {
		return "perf: no walsender seen"
	}
	select {
	case <-ctx.Done():
		return "perf: " + ctx.Err().Error()
	case <-time.After(time.Second):
	}
	f, err := os.CreateTemp("", "walsender-*.perf")
	if err != nil {
		return "perf: " + err.Error()
	}
	f.Close()
	defer os.Remove(f.Name())
	rec := exec.CommandContext(ctx, "perf", "record", "-q", "-F", "999", "-p", strconv.Itoa(pid), "-o", f.Name(), "--", "sleep", fmt.Sprint(d.Seconds()))
	// An error is expected when the walsender exits before d is over (the
	// drain ended): what was recorded until then is still reported.
	recOut, recErr := rec.CombinedOutput()
	if st, err := os.Stat(f.Name()); err != nil || st.Size() == 0 {
		return fmt.Sprintf("perf record: %v: %s", recErr, strings.TrimSpace(string(recOut)))
	}
	var sb strings.Builder
	for _, sort := range []string{"dso", "symbol"} {
		b, err := exec.CommandContext(ctx, "perf", "report", "-i", f.Name(), "--no-children", "--sort", sort, "--stdio").CombinedOutput()
		if err != nil {
			return fmt.Sprintf("perf report: %v: %s", err, strings.TrimSpace(string(b)))
		}
		n, limit := 0, map[string]int{"dso": 5, "symbol": 12}[sort]
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "#") || !strings.Contains(l, "%") {
				continue
			}
			if n == limit {
				break
			}
			sb.WriteString(strings.Join(strings.Fields(l), " ") + "\n")
			n++
		}
		sb.WriteString("\n")
	}
	return strings.TrimSpace(sb.String())
}
