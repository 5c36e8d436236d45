package main

import (
	"fmt"

	"github.com/outboxd/outboxd/bench/internal/stats"
)

// Results is results.json: the runs as measured, and the figures the
// report's tables show, derived from them.
type Results struct {
	Date     string            `json:"date"`
	Args     []string          `json:"args,omitempty"` // fleet-bench's flags in this run
	Machine  map[string]string `json:"machine"`
	Settings map[string]string `json:"settings"`
	Idle     []idleRun         `json:"idle_runs"`
	Load     []loadRun         `json:"load_runs"`
	// IdleFigures set A beside B, LoadFigures A beside the single
	// pipeline, PeerFigures C beside D.
	IdleFigures []figure `json:"idle_figures"`
	LoadFigures []figure `json:"load_figures"`
	PeerFigures []figure `json:"debezium_figures,omitempty"`
	// FloorFigures set F beside F1, and Floor sets F against the
	// single pipeline and A.
	FloorFigures []figure          `json:"floor_figures,omitempty"`
	Floor        *floorVerdict     `json:"floor,omitempty"`
	Errors       map[string]string `json:"errors,omitempty"`
}

// figure is a row of a table: one figure of each system over the
// repetitions, and the target issue 39 sets A, if any.
type figure struct {
	Name    string                  `json:"figure"`
	Systems map[string]stats.Spread `json:"systems"`
	Target  string                  `json:"target,omitempty"`
	// Met says whether A's median meets the target: yes or no, "-"
	// where A has no run ("" without a target).
	Met string `json:"met,omitempty"`
}

// Targets of issue 39.
const (
	rssTargetMiB      = 150
	idleTargetPercent = 1
	p99TargetMs       = 20
	cpuTargetRatio    = 1.5
)

// spreadOf is the spread of f over runs of one system.
func spreadOf[R any](runs []R, system func(R) string, name string, f func(R) float64) stats.Spread {
	var vs []float64
	for _, r := range runs {
		if system(r) == name {
			vs = append(vs, f(r))
		}
	}
	return stats.SpreadOf(vs)
}

// met is a figure's Met: ok of A's median, "-" without A.
func met(a stats.Spread, ok func(median float64) bool) string {
	switch {
	case a.N == 0:
		return "-"
	case ok(a.Median):
		return "yes"
	}
	return "no"
}

const mib = 1 << 20

// idleFigures are A beside B: start-up, peak RSS and the idle window.
func idleFigures(runs []idleRun) []figure {
	row := func(name string, f func(idleRun) float64) figure {
		mode := func(r idleRun) string { return r.Mode }
		return figure{Name: name, Systems: map[string]stats.Spread{"A": spreadOf(runs, mode, "A", f), "B": spreadOf(runs, mode, "B", f)}}
	}
	rss := row("peak RSS, MiB (B: its processes' summed)", func(r idleRun) float64 { return float64(r.PeakRSSBytes) / mib })
	rss.Target, rss.Met = fmt.Sprintf("≤ %d MiB", rssTargetMiB), met(rss.Systems["A"], func(m float64) bool { return m <= rssTargetMiB })
	cpu := row("idle CPU, % of a core (B: summed)", idleRun.IdleCorePercent)
	cpu.Target, cpu.Met = fmt.Sprintf("≤ %d%%", idleTargetPercent), met(cpu.Systems["A"], func(m float64) bool { return m <= idleTargetPercent })
	return []figure{
		row("launch to every pipeline streaming, s", func(r idleRun) float64 { return r.StreamingSeconds }),
		row("launch to every walsender caught up, s", func(r idleRun) float64 { return r.CaughtUpSeconds }),
		rss,
		cpu,
		row("walsenders' idle CPU, % of a core", func(r idleRun) float64 { return 100 * r.IdleWalsenderCPUSeconds / r.IdleSeconds }),
		row("server WAL written while idle, KiB (every walsender reads it)", func(r idleRun) float64 { return float64(r.IdleWALBytes) / 1024 }),
		row("outboxd wake-ups a second while idle", func(r idleRun) float64 { return float64(r.IdleWakeups) / r.IdleSeconds }),
		row("machine busy while idle, % of all cores", func(r idleRun) float64 { return 100 * r.MachineBusy }),
	}
}

// loadRow makes rows of a table of load runs: one figure f of systems a
// and b over their repetitions.
func loadRow(runs []loadRun, a, b string) func(name string, f func(loadRun) float64) figure {
	system := func(r loadRun) string { return r.System }
	return func(name string, f func(loadRun) float64) figure {
		return figure{Name: name, Systems: map[string]stats.Spread{a: spreadOf(runs, system, a, f), b: spreadOf(runs, system, b, f)}}
	}
}

// unlessEmpty is a table, nil when neither of its systems has a run.
func unlessEmpty(fs []figure) []figure {
	for _, s := range fs[0].Systems {
		if s.N > 0 {
			return fs
		}
	}
	return nil
}

// peerFigures are C beside D at the same steady rate, none without runs
// of either.
func peerFigures(runs []loadRun) []figure {
	row := loadRow(runs, "C", "D")
	fs := []figure{
		row("p99 commit to consumer, ms", func(r loadRun) float64 { return r.P99ms }),
		row("p50 commit to consumer, ms", func(r loadRun) float64 { return r.P50ms }),
		row("publisher's CPU per event, µs", func(r loadRun) float64 { return r.PublisherCPUus }),
		row("walsenders' CPU per event, µs", func(r loadRun) float64 { return r.ServerCPUus }),
		row("publisher's and walsenders' CPU per event, µs", func(r loadRun) float64 { return r.PublisherCPUus + r.ServerCPUus }),
		row("peak RSS at the end of the load, MiB", func(r loadRun) float64 { return float64(r.PeakRSSBytes) / mib }),
		row("launch to every walsender caught up, s", func(r loadRun) float64 { return r.CaughtUpSeconds }),
		row("events written a second", func(r loadRun) float64 { return r.WrittenRate }),
		row("events delivered, % of written", func(r loadRun) float64 { return 100 * float64(r.Delivered) / float64(max(1, r.Written)) }),
		row("machine busy, % of all cores", func(r loadRun) float64 { return 100 * r.MachineBusy }),
	}
	return unlessEmpty(fs)
}

// loadFigures are A beside the single pipeline at the same steady rate.
func loadFigures(runs []loadRun) []figure {
	row := loadRow(runs, "A", "single")
	p99 := row("p99 commit to consumer, ms", func(r loadRun) float64 { return r.P99ms })
	p99.Target, p99.Met = fmt.Sprintf("≤ %d ms", p99TargetMs), met(p99.Systems["A"], func(m float64) bool { return m <= p99TargetMs })
	cpu := row("outboxd CPU per event, µs", func(r loadRun) float64 { return r.PublisherCPUus })
	single := cpu.Systems["single"].Median
	cpu.Target = fmt.Sprintf("≤ %g × single's", cpuTargetRatio)
	if single > 0 && cpu.Systems["A"].N > 0 {
		cpu.Target += fmt.Sprintf(" (A: %.2f ×)", cpu.Systems["A"].Median/single)
	}
	cpu.Met = met(cpu.Systems["A"], func(m float64) bool { return single > 0 && m <= cpuTargetRatio*single })
	return []figure{
		p99,
		row("p50 commit to consumer, ms", func(r loadRun) float64 { return r.P50ms }),
		cpu,
		row("walsenders' CPU per event, µs", func(r loadRun) float64 { return r.ServerCPUus }),
		row("outboxd's and walsenders' CPU per event, µs", func(r loadRun) float64 { return r.PublisherCPUus + r.ServerCPUus }),
		row("outboxd wake-ups per transaction", func(r loadRun) float64 { return r.PublisherWakeups }),
		row("events written a second", func(r loadRun) float64 { return r.WrittenRate }),
		row("events delivered, % of written", func(r loadRun) float64 { return 100 * float64(r.Delivered) / float64(max(1, r.Written)) }),
		row("peak RSS at the end of the load, MiB", func(r loadRun) float64 { return float64(r.PeakRSSBytes) / mib }),
		row("machine busy, % of all cores", func(r loadRun) float64 { return 100 * r.MachineBusy }),
	}
}

// floorFigures are F beside F1 at the same steady rate as A's, none
// without runs of either.
func floorFigures(runs []loadRun) []figure {
	row := loadRow(runs, "F", "F1")
	fs := []figure{
		row("p99 commit to receipt, ms", func(r loadRun) float64 { return r.P99ms }),
		row("p50 commit to receipt, ms", func(r loadRun) float64 { return r.P50ms }),
		row("reader's CPU per event, µs", func(r loadRun) float64 { return r.PublisherCPUus }),
		row("walsenders' CPU per event, µs", func(r loadRun) float64 { return r.ServerCPUus }),
		row("reader's and walsenders' CPU per event, µs", func(r loadRun) float64 { return r.PublisherCPUus + r.ServerCPUus }),
		row("reader's wake-ups per transaction", func(r loadRun) float64 { return r.PublisherWakeups }),
		row("events written a second", func(r loadRun) float64 { return r.WrittenRate }),
		row("events received, % of written", func(r loadRun) float64 { return 100 * float64(r.Delivered) / float64(max(1, r.Written)) }),
		row("peak RSS at the end of the load, MiB", func(r loadRun) float64 { return float64(r.PeakRSSBytes) / mib }),
		row("machine busy, % of all cores", func(r loadRun) float64 { return 100 * r.MachineBusy }),
	}
	return unlessEmpty(fs)
}

// floorVerdict sets the medians of the floor against issue 39's CPU
// target: what reading the fleet's slots alone costs (F), beside the
// single pipeline's outboxd and A's.
type floorVerdict struct {
	FloorUs  float64 `json:"floor_cpu_us_per_event"`  // F's reader
	SingleUs float64 `json:"single_cpu_us_per_event"` // the single pipeline's outboxd
	AUs      float64 `json:"a_cpu_us_per_event"`      // A's outboxd
	// FloorRatio is FloorUs over SingleUs: where cpuTargetRatio would
	// have to lie for A to be able to meet it while reading its slots.
	FloorRatio float64 `json:"floor_over_single"`
	// BelowFloor says the target ratio lies below FloorRatio: no client
	// reading the slots as F does can meet it.
	BelowFloor bool `json:"target_below_floor"`
	// AboveFloorUs is what A's outboxd spends an event beyond F's.
	AboveFloorUs float64 `json:"a_above_floor_us_per_event"`
}

// floorOf is the verdict of runs, nil without runs of F, A and the
// single pipeline.
func floorOf(runs []loadRun) *floorVerdict {
	system := func(r loadRun) string { return r.System }
	cpu := func(r loadRun) float64 { return r.PublisherCPUus }
	f, single, a := spreadOf(runs, system, "F", cpu), spreadOf(runs, system, "single", cpu), spreadOf(runs, system, "A", cpu)
	if f.N == 0 || single.N == 0 || a.N == 0 || single.Median <= 0 {
		return nil
	}
	ratio := f.Median / single.Median
	return &floorVerdict{FloorUs: f.Median, SingleUs: single.Median, AUs: a.Median, FloorRatio: ratio,
		BelowFloor: cpuTargetRatio < ratio, AboveFloorUs: a.Median - f.Median}
}
