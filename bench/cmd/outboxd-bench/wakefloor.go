package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// wakeFloor is what one wake-up of an idle Go process costs on this machine
// at a given rate (bench/cmd/wakecost), measured in the same run as the
// systems.
type wakeFloor struct {
	PerSecond   int     `json:"wakeups_per_second"`
	UsPerWakeup float64 `json:"cpu_us_per_wakeup"`
	// UsPerWakeupRaw is the same reading through package rawio, as
	// outboxd reads (0 in results recorded before it was measured).
	UsPerWakeupRaw float64 `json:"cpu_us_per_wakeup_raw,omitempty"`
}

// FloorUsPerEvent is the least CPU per event a publisher woken twice per
// transaction (its arrival, Kafka's acknowledgment) can cost, with
// 10-event transactions: with outboxd's raw reads where they were
// measured.
func (w wakeFloor) FloorUsPerEvent() float64 {
	if w.UsPerWakeupRaw > 0 {
		return 2 * w.UsPerWakeupRaw / 10
	}
	return 2 * w.UsPerWakeup / 10
}

// measureWakeFloors runs wakecost at each steady rate's transaction rate
// (10 events per transaction).
func measureWakeFloors(ctx context.Context, rates []int) ([]wakeFloor, error) {
	bin, cleanup, err := buildTool(ctx, "wakecost")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var floors []wakeFloor
	for _, rate := range rates {
		tx := max(1, rate/10)
		w := wakeFloor{PerSecond: tx}
		for _, raw := range []bool{false, true} {
			out, err := exec.CommandContext(ctx, bin, "-rate", fmt.Sprint(tx), "-n", fmt.Sprint(max(300, 4*tx)), fmt.Sprintf("-raw=%t", raw)).Output()
			if err != nil {
				return floors, fmt.Errorf("wakecost at %d/s: %w", tx, err)
			}
			var r struct {
				US float64 `json:"cpu_us_per_message"`
			}
			if err := json.Unmarshal(out, &r); err != nil {
				return floors, fmt.Errorf("wakecost output %q: %w", out, err)
			}
			if raw {
				w.UsPerWakeupRaw = r.US
			} else {
				w.UsPerWakeup = r.US
			}
		}
		floors = append(floors, w)
	}
	return floors, nil
}

// buildTool builds bench/cmd/NAME into a temporary directory; cleanup
// removes it.
func buildTool(ctx context.Context, name string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "outboxd-bench-"+name+"-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, name)
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./bench/cmd/"+name).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building %s: %w\n%s", name, err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}
