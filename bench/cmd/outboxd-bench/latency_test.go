package main

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestSummarizeLatencyTakesTheMedianRun(t *testing.T) {
	runs := []latencyResult{
		{System: "outboxd", Rep: 1, TargetRate: 5000, P50ms: 1, P99ms: 9, PublisherWakeups: 2.5, Sustained: true, Reached: true},
		{System: "outboxd", Rep: 2, TargetRate: 5000, P50ms: 2, P99ms: 3, PublisherWakeups: 3.5, Sustained: true, Reached: true},
		{System: "outboxd", Rep: 3, TargetRate: 5000, P50ms: 3, P99ms: 4, PublisherWakeups: 2, Sustained: true, Reached: true},
		{System: "relay", Rep: 1, TargetRate: 5000, P99ms: 100, Sustained: true, Reached: true},
	}
	sum := summarizeLatency(runs)
	if len(sum) != 2 || sum[0].System != "outboxd" || sum[1].System != "relay" {
		t.Fatalf("groups %+v, want outboxd then relay", sum)
	}
	o := sum[0]
	if o.Rep != 3 || o.P99ms != 4 || o.P50ms != 3 || o.Runs != 3 || o.P99MinMs != 3 || o.P99MaxMs != 9 {
		t.Errorf("outboxd summary %+v: want run 3 (p99 4 ms) of 3, range 3-9 ms", o)
	}
	if o.PublisherWakeupsMedian != 2.5 {
		t.Errorf("wake-ups per transaction: median %v of 2.5, 3.5 and 2, want 2.5", o.PublisherWakeupsMedian)
	}
}

func TestHighestSustained(t *testing.T) {
	sum := summarizeLatency([]latencyResult{
		{System: "a", TargetRate: 1000, WrittenRate: 1000, P99ms: 5, Sustained: true, Reached: true},
		{System: "a", TargetRate: 40000, WrittenRate: 30000, P99ms: 70, Sustained: true, Reached: false},
		{System: "b", TargetRate: 1000, WrittenRate: 1000, P99ms: 9, Sustained: true, Reached: true},
		{System: "b", TargetRate: 20000, WrittenRate: 19000, P99ms: 2000, Sustained: false, Reached: true},
		{System: "c", TargetRate: 1000, WrittenRate: 1000, P99ms: 9, Sustained: true, Reached: true},
	})
	got := highestSustained(sum)
	want := []string{
		"a: 30000 events/s written, p99 70.0 ms; the writers reached no higher rate",
		"b: 1000 events/s written, p99 9.0 ms; not sustained at a target of 20000/s",
		"c: 1000 events/s written, p99 9.0 ms; the highest rate tried",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("line %d = %q, want it to start with %q", i, got[i], want[i])
		}
	}
}

func TestStageQuantiles(t *testing.T) {
	snap := func(counts ...uint64) histSnapshot {
		les := []float64{0.001, 0.002, 0.004, inf}
		var bs []bucket
		for i, c := range counts {
			bs = append(bs, bucket{le: les[i], count: c})
		}
		return histSnapshot{"outboxd_commit_to_ack_seconds": bs}
	}
	tests := []struct {
		name          string
		before, after histSnapshot
		count         uint64
		p50, p99      float64 // ms
	}{
		// 100 new observations: 50 up to 1 ms, 40 in (1, 2], 10 in (2, 4].
		{"interpolated", snap(10, 10, 10, 10), snap(60, 100, 110, 110), 100, 1, 3.8},
		// Observations above the last finite bound give that bound.
		{"over the top bucket", snap(0, 0, 0, 0), snap(0, 0, 0, 10), 10, 4, 4},
		{"nothing observed", snap(5, 5, 5, 5), snap(5, 5, 5, 5), 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := stagesBetween(tt.before, tt.after)
			if len(got) != 1 || got[0].Stage != "commit to Kafka ack" {
				t.Fatalf("stages %+v, want the commit-to-ack stage alone", got)
			}
			g := got[0]
			if g.Count != tt.count || math.Abs(g.P50ms-tt.p50) > 1e-9 || math.Abs(g.P99ms-tt.p99) > 1e-9 {
				t.Errorf("got count %d p50 %v p99 %v, want %d %v %v", g.Count, g.P50ms, g.P99ms, tt.count, tt.p50, tt.p99)
			}
		})
	}
}

// A before/after pair runs its steady rates interleaved, as one group: run
// one after the other, the machine's drift over the run fell on one build
// and not the other.
func TestLatencyGroups(t *testing.T) {
	tests := []struct {
		systems []string
		want    [][]string
	}{
		{[]string{"pg_recvlogical", "outboxd", "relay"}, [][]string{{"outboxd"}, {"relay"}}},
		{[]string{"pg_recvlogical", "outboxd", "outboxd-baseline", "relay"}, [][]string{{"outboxd", "outboxd-baseline"}, {"relay"}}},
		{[]string{"outboxd-baseline", "debezium", "outboxd"}, [][]string{{"debezium"}, {"outboxd", "outboxd-baseline"}}},
		{[]string{"outboxd-baseline"}, [][]string{{"outboxd-baseline"}}},
		{[]string{"outboxd-linger", "outboxd", "relay"}, [][]string{{"outboxd", "outboxd-linger"}, {"relay"}}},
		{[]string{"outboxd-linger", "outboxd", "outboxd-baseline"}, [][]string{{"outboxd", "outboxd-baseline", "outboxd-linger"}}},
		{[]string{"outboxd-linger"}, [][]string{{"outboxd-linger"}}},
	}
	for _, tt := range tests {
		if got := latencyGroups(tt.systems); !slices.EqualFunc(got, tt.want, slices.Equal) {
			t.Errorf("latencyGroups(%v) = %v, want %v", tt.systems, got, tt.want)
		}
	}
}

// The read linger's trade is reported per rate measured for both systems:
// outboxd-linger's CPU per event over outboxd's, beside both latencies.
func TestLingerTrade(t *testing.T) {
	sum := func(sys string, rate int, cpu, p50, p99 float64) latencySummary {
		return latencySummary{latencyResult: latencyResult{System: sys, TargetRate: rate, P50ms: p50, P99ms: p99},
			PublisherCPUMedianUs: cpu, P99MinMs: p99 - 1, P99MaxMs: p99 + 1}
	}
	got := lingerTrade([]latencySummary{
		sum("outboxd", 1000, 30, 1.5, 6), sum("outboxd-linger", 1000, 15, 9, 20),
		sum("outboxd", 5000, 20, 1.4, 5),
		sum("outboxd-linger", 10000, 9, 8, 14),
	})
	want := map[string]string{
		"read linger at 1000 events/s: outboxd-linger over outboxd": "CPU per event 0.50 x (15.0 against 30.0 µs), p50 9.0 against 1.5 ms (the runs of median p99), p99 20.0 (19.0-21.0) against 6.0 (5.0-7.0) ms",
	}
	if !maps.Equal(got, want) {
		t.Errorf("lingerTrade = %v, want %v", got, want)
	}
}
