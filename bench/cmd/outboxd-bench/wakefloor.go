package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/outboxd/outboxd/bench/internal/stats"
)

// wakeFloor is what one wake-up of an idle Go process costs on this machine
// at a given rate (bench/cmd/wakecost), measured in the same run as the
// systems or later by outboxd-bench -floors. Each figure is the median of
// wakeFloorReps runs (a single run in results recorded before the pair was
// measured).
type wakeFloor struct {
	PerSecond   int     `json:"wakeups_per_second"`
	UsPerWakeup float64 `json:"cpu_us_per_wakeup"`
	// UsPerWakeupRaw is the same reading through package rawio, as
	// outboxd reads (0 in results recorded before it was measured).
	UsPerWakeupRaw float64 `json:"cpu_us_per_wakeup_raw,omitempty"`
	// UsPerPairRaw is the CPU of two raw wake-ups PairGapUs apart, once
	// per interval: a transaction's arrival and Kafka's acknowledgment (0
	// in results recorded before it was measured). A wake-up soon after
	// another costs less than one after a long rest, so this is less than
	// twice UsPerWakeupRaw.
	UsPerPairRaw float64 `json:"cpu_us_per_pair_raw,omitempty"`
	// PairGapUs is the time between the pair's two messages.
	PairGapUs int `json:"pair_gap_us,omitempty"`
	// TxSize is the events per transaction of the steady rate measured
	// for (0 in results recorded before -transaction-size: 10).
	TxSize int `json:"events_per_transaction,omitempty"`
}

// pairGap is the gap between the two wake-ups of one transaction in the
// floor: about the broker's acknowledgment p50 to outboxd's producer alone
// on this machine (the report's producer-alone table measures it).
// At rates where transactions come closer than twice that, the gap is
// half the interval.
const pairGap = 500 * time.Microsecond

// wakeFloorReps is how many times each wake-up figure is measured; the
// median is kept, since single runs of one figure spread widely on a
// shared VM.
const wakeFloorReps = 5

// FloorUsPerEvent is the least CPU per event a publisher woken twice per
// transaction (its arrival, Kafka's acknowledgment) can cost, with
// transactions of TxSize events: the measured pair where there is one,
// else twice a single wake-up (an overstatement: see UsPerPairRaw).
func (w wakeFloor) FloorUsPerEvent() float64 {
	size := float64(cmp.Or(w.TxSize, defaultTxSize))
	switch {
	case w.UsPerPairRaw > 0:
		return w.UsPerPairRaw / size
	case w.UsPerWakeupRaw > 0:
		return 2 * w.UsPerWakeupRaw / size
	}
	return 2 * w.UsPerWakeup / size
}

// minFloorRate is the lowest steady rate (events/s) whose floors are
// measured: below 100 transactions a second, the 300 wake-ups of one
// wakecost run take minutes each, and the targets name no such rate.
const minFloorRate = 1000

// floorRates are the rates of rates whose floors are measured.
func floorRates(rates []int) []int {
	return slices.DeleteFunc(slices.Clone(rates), func(r int) bool { return r < minFloorRate })
}

// measureWakeFloors runs wakecost at each steady rate's transaction rate
// (size events per transaction).
func measureWakeFloors(ctx context.Context, rates []int, size int) ([]wakeFloor, error) {
	bin, cleanup, err := buildTool(ctx, "wakecost")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var floors []wakeFloor
	for _, rate := range rates {
		tx := max(1, rate/size)
		interval := time.Second / time.Duration(tx)
		gap := min(pairGap, interval/2)
		w := wakeFloor{PerSecond: tx, PairGapUs: int(gap.Microseconds()), TxSize: size}
		for _, m := range []struct {
			raw  bool
			pair time.Duration
			into *float64
		}{{false, 0, &w.UsPerWakeup}, {true, 0, &w.UsPerWakeupRaw}, {true, gap, &w.UsPerPairRaw}} {
			var runs []float64
			for range wakeFloorReps {
				out, err := exec.CommandContext(ctx, bin, "-rate", fmt.Sprint(tx), "-n", fmt.Sprint(max(300, 4*tx)),
					fmt.Sprintf("-raw=%t", m.raw), "-pair", m.pair.String()).Output()
				if err != nil {
					return floors, fmt.Errorf("wakecost at %d/s: %w", tx, err)
				}
				var r struct {
					US float64 `json:"cpu_us_per_interval"`
				}
				if err := json.Unmarshal(out, &r); err != nil {
					return floors, fmt.Errorf("wakecost output %q: %w", out, err)
				}
				runs = append(runs, r.US)
			}
			slices.Sort(runs)
			*m.into = stats.Median(runs)
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
