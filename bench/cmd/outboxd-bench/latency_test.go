package main

import (
	"strings"
	"testing"
)

func TestSummarizeLatencyTakesTheMedianRun(t *testing.T) {
	runs := []latencyResult{
		{System: "outboxd", Rep: 1, TargetRate: 5000, P50ms: 1, P99ms: 9, Sustained: true, Reached: true},
		{System: "outboxd", Rep: 2, TargetRate: 5000, P50ms: 2, P99ms: 3, Sustained: true, Reached: true},
		{System: "outboxd", Rep: 3, TargetRate: 5000, P50ms: 3, P99ms: 4, Sustained: true, Reached: true},
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
