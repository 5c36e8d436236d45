package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/bench/internal/steady"
)

// sample is a run of 3 repetitions: A within its RSS and idle targets on
// the median though not in every repetition, B above them, A's load
// missing its latency target and within 1.5 times the single pipeline's
// CPU per event.
func sample() Results {
	r := Results{Date: "2026-12-05T00:00:00Z", Args: []string{"-pipelines", "100", "-reps", "3"},
		Machine:  map[string]string{"cpus": "2", "memory": "MemTotal:   24731408 kB"},
		Settings: map[string]string{"pipelines": "100", "reps": "3", "rate": "10000", "idle": "1m0s"}}
	for i, rss := range []int64{140, 160, 145} {
		r.Idle = append(r.Idle,
			idleRun{Mode: "A", Rep: i + 1, StreamingSeconds: 2, PeakRSSBytes: rss * mib, IdleSeconds: 60, IdleCPUSeconds: 0.3},
			idleRun{Mode: "B", Rep: i + 1, StreamingSeconds: 9, PeakRSSBytes: 2000 * mib, IdleSeconds: 60, IdleCPUSeconds: 6})
		r.Load = append(r.Load,
			loadRun{System: "A", Rep: i + 1, Result: steady.Result{P99ms: 25 + float64(i)}, PublisherCPUus: 14},
			loadRun{System: "single", Rep: i + 1, Result: steady.Result{P99ms: 9}, PublisherCPUus: 10})
	}
	return r
}

// withDebezium is sample with C's and D's runs: 10 pipelines at 1000
// events/s.
func withDebezium() Results {
	r := sample()
	r.Settings["debezium_pipelines"], r.Settings["debezium_rate"], r.Settings["debezium"] = "10", "1000", "Debezium 3.6.1.Final on Kafka Connect 4.3.1"
	for i := range 3 {
		r.Load = append(r.Load,
			loadRun{System: "C", Rep: i + 1, Result: steady.Result{P99ms: 5}, PublisherCPUus: 20, PeakRSSBytes: 30 * mib},
			loadRun{System: "D", Rep: i + 1, Result: steady.Result{P99ms: 12 + float64(i)}, PublisherCPUus: 300, PeakRSSBytes: 600 * mib})
	}
	return r
}

// C's and D's runs get a table of their own, and stay out of A's.
func TestDebeziumStepsHaveTheirOwnTable(t *testing.T) {
	r := withDebezium()
	writeAndCheck(t, t.TempDir(), r,
		"## 10 pipelines beside 10 Debezium connectors on one Kafka Connect worker",
		"Debezium 3.6.1.Final on Kafka Connect 4.3.1: one standalone worker",
		"1000 events/s for",
		"100 events/s into each,",
		"| figure | C median | C min - max | D median | D min - max |",
		"| p99 commit to consumer, ms | 5.00 | 5.00 - 5.00 | 13.0 | 12.0 - 14.0 |",
		"| peak RSS at the end of the load, MiB | 30.0 | 30.0 - 30.0 | 600 | 600 - 600 |",
	)
	if p99 := find(t, loadFigures(r.Load), "p99"); p99.Systems["A"].Median != 26 || p99.Systems["A"].N != 3 {
		t.Errorf("A's p99 = %+v, want its own three runs only", p99.Systems["A"])
	}
	if peerFigures(sample().Load) != nil {
		t.Error("peer figures from a run without C or D")
	}
}

// withFloor is sample with F's and F1's runs: reading the 100 slots alone
// costs twice the single pipeline's outboxd CPU per event.
func withFloor(floorUs float64) Results {
	r := sample()
	for i := range 3 {
		r.Load = append(r.Load,
			loadRun{System: "F", Rep: i + 1, Result: steady.Result{P99ms: 7, Written: 100, Delivered: 100}, PublisherCPUus: floorUs + float64(i)},
			loadRun{System: "F1", Rep: i + 1, Result: steady.Result{P99ms: 1, Written: 100, Delivered: 100}, PublisherCPUus: 2})
	}
	return r
}

// F's and F1's runs get a table of their own, and the floor is set against
// the CPU target: the target lies below it when reading alone costs more
// than the target allows A.
func TestFloorStepsAreSetAgainstTheTarget(t *testing.T) {
	writeAndCheck(t, t.TempDir(), withFloor(20),
		"## The floor: the same slots read, and nothing done with what arrives",
		"| figure | F median | F min - max | F1 median | F1 min - max |",
		"| reader's CPU per event, µs | 21.0 | 20.0 - 22.0 | 2.00 | 2.00 - 2.00 |",
		"| events received, % of written | 100 | 100 - 100 | 100 | 100 - 100 |",
		"Reading the 100 slots alone costs 21.0 µs an event, 2.10 × the",
		"single pipeline's outboxd CPU per event (10.0 µs): the target of\n1.5 × that figure lies below this floor. A's outboxd spends 14.0 µs,\n-7.00 µs",
	)
	writeAndCheck(t, t.TempDir(), withFloor(11), "1.5 × that figure lies above this floor.")
	if v := floorOf(withFloor(11).Load); v == nil || v.BelowFloor || v.FloorRatio != 1.2 {
		t.Errorf("floorOf = %+v, want 1.2 × single's, not below the target", v)
	}
	if floorFigures(sample().Load) != nil || floorOf(sample().Load) != nil {
		t.Error("floor figures from a run without F or F1")
	}
	if find(t, loadFigures(withFloor(20).Load), "outboxd CPU per event").Systems["A"].N != 3 {
		t.Error("A's CPU per event takes in other systems' runs")
	}
}

// Each repetition runs every step once, every other one in reverse.
func TestStepOrder(t *testing.T) {
	for _, c := range []struct {
		rep                                    int
		withDebezium, withFloor, withProcesses bool
		want                                   string
	}{
		{1, false, false, true, "A single B"},
		{2, false, false, true, "B single A"},
		{1, true, false, true, "A single B C D"},
		{2, true, false, true, "D C B single A"},
		{1, false, true, true, "A single F1 F B"},
		{2, true, true, true, "D C B F F1 single A"},
		{1, false, false, false, "A single"},
		{2, false, false, false, "single A"},
	} {
		if got := strings.Join(stepOrder(c.rep, c.withDebezium, c.withFloor, c.withProcesses), " "); got != c.want {
			t.Errorf("stepOrder(%d, %v, %v, %v) = %s, want %s", c.rep, c.withDebezium, c.withFloor, c.withProcesses, got, c.want)
		}
	}
}

func find(t *testing.T, figs []figure, name string) figure {
	t.Helper()
	for _, f := range figs {
		if strings.HasPrefix(f.Name, name) {
			return f
		}
	}
	t.Fatalf("no figure %q", name)
	return figure{}
}

// A target is judged on A's median; the other system's figures stand
// beside it.
func TestFiguresJudgeATargetOnItsMedian(t *testing.T) {
	r := sample()
	idle, load := idleFigures(r.Idle), loadFigures(r.Load)
	rss := find(t, idle, "peak RSS")
	if rss.Met != "yes" || rss.Systems["A"].Median != 145 || rss.Systems["A"].Max != 160 || rss.Systems["B"].Median != 2000 {
		t.Errorf("peak RSS = %+v, want A's median 145 (max 160) met and B's 2000 beside it", rss)
	}
	cpu := find(t, idle, "idle CPU")
	if cpu.Met != "yes" || cpu.Systems["A"].Median != 0.5 || cpu.Systems["B"].Median != 10 {
		t.Errorf("idle CPU = %+v, want A at 0.5%% of a core (met), B at 10%%", cpu)
	}
	if p99 := find(t, load, "p99"); p99.Met != "no" || p99.Systems["A"].Median != 26 {
		t.Errorf("p99 = %+v, want A's median 26 ms, not met", p99)
	}
	if c := find(t, load, "outboxd CPU per event"); c.Met != "yes" || !strings.Contains(c.Target, "(A: 1.40 ×)") {
		t.Errorf("CPU per event = %+v, want met at 1.40 times the single pipeline's", c)
	}
	if f := find(t, loadFigures(nil), "p99"); f.Met != "-" {
		t.Errorf("p99 without runs: met %q, want -", f.Met)
	}
}

// The report names the command that produced it and shows A beside B,
// and A beside the single pipeline, with the targets.
func TestReportNamesItsCommandAndTables(t *testing.T) {
	dir := t.TempDir()
	readme := writeAndCheck(t, dir, sample(),
		"`fleet-bench -pipelines 100 -reps 3`",
		"Machine: 2 cores",
		"MemTotal: 24731408 kB",
		"| figure | A median | A min - max | B median | B min - max | target (A) | met? |",
		"| peak RSS, MiB (B: its processes' summed) | 145 | 140 - 160 | 2000 | 2000 - 2000 | ≤ 150 MiB | yes |",
		"| figure | A median | A min - max | single median | single min - max | target (A) | met? |",
		"| p99 commit to consumer, ms | 26.0 | 25.0 - 27.0 | 9.00 | 9.00 - 9.00 | ≤ 20 ms | no |",
		"100 events/s into each database",
	)
	if strings.Contains(readme, "Debezium") {
		t.Errorf("README.md of a run without the Debezium steps has a section on them:\n%s", readme)
	}
	if err := rerender(dir); err != nil {
		t.Fatalf("re-rendering: %v", err)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "README.md"))
	if string(again) != readme {
		t.Error("re-rendering from results.json changed README.md")
	}
}

// writeAndCheck writes r's report into dir and checks that its README.md
// has every line of want; it returns the README.
func writeAndCheck(t *testing.T, dir string, r Results, want ...string) string {
	t.Helper()
	if err := write(dir, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, w := range want {
		if !strings.Contains(readme, w) {
			t.Errorf("README.md lacks %q:\n%s", w, readme)
		}
	}
	return readme
}
