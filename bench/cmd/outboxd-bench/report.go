package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/outboxd/outboxd/bench/internal/cmdline"
	"github.com/outboxd/outboxd/cdc"
)

// microBenchmarks runs the Go micro-benchmarks of the hot paths.
func microBenchmarks(ctx context.Context) []string {
	out, err := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-count", "1", "./decode", "./checkpoint").CombinedOutput()
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Benchmark") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	if err != nil {
		lines = append(lines, "error: "+err.Error())
	}
	return lines
}

// targets states each target of the benchmark issue with the measured figure.
// ackFloor tells the p99 of Kafka's acknowledgments to the producer alone
// at rate, where it was measured.
func ackFloor(r Results, rate int) string {
	for _, f := range r.ProduceFloors {
		if f.Rate == rate {
			return fmt.Sprintf("; the broker's acknowledgments to outboxd's producer alone: p99 %.1f ms (median of %d runs; %.1f-%.1f ms)", f.AckP99Ms, f.Runs, f.AckP99MinMs, f.AckP99MaxMs)
		}
	}
	return ""
}

func targets(r Results) map[string]string {
	t := map[string]string{}
	s := r.Summary
	verdict := func(ok bool) string {
		if ok {
			return "reached"
		}
		return "missed"
	}
	ratio := func(a, b string) (float64, bool) {
		if s[a].EventsPerSec == 0 || s[b].EventsPerSec == 0 {
			return 0, false
		}
		return s[a].EventsPerSec / s[b].EventsPerSec, true
	}
	if x, ok := ratio("outboxd", "pg_recvlogical"); ok {
		t["drain >= 0.95 x pg_recvlogical"] = fmt.Sprintf("%s: %.2f x", verdict(x >= 0.95), x)
	}
	if x, ok := ratio("outboxd", "debezium"); ok {
		t["drain >= 3 x Debezium"] = fmt.Sprintf("%s: %.2f x", verdict(x >= 3), x)
	} else if why := r.Errors["debezium"]; why != "" {
		t["drain >= 3 x Debezium"] = "not measured: " + why
	}
	if x, ok := ratio("outboxd", "outboxd-baseline"); ok {
		t["before/after: drain events/s of outboxd over outboxd-baseline"] = fmt.Sprintf("%.2f x", x)
	}
	if x, ok := ratio("outboxd-eos", "outboxd"); ok {
		t["exactly-once cost: drain events/s of outboxd-eos over outboxd"] = fmt.Sprintf("%.2f x", x)
	}
	for _, sys := range codecSystems {
		if x, ok := ratio(sys, "outboxd"); ok && s["outboxd"].TopicBytesPerEvent > 0 {
			t["compression: "+sys+" over outboxd (snappy)"] = fmt.Sprintf("drain events/s %.2f x, CPU per event %.2f x, Kafka bytes per event %.2f x",
				x, s[sys].CPUSecondsPer100k/s["outboxd"].CPUSecondsPer100k, s[sys].TopicBytesPerEvent/s["outboxd"].TopicBytesPerEvent)
		}
	}
	for _, sys := range formatSystems {
		if x, ok := ratio(sys, "outboxd"); ok {
			t["schema format: drain of "+sys+" >= 0.8 x outboxd (json)"] = fmt.Sprintf("%s: %.2f x, CPU per event %.2f x", verdict(x >= 0.8),
				x, s[sys].CPUSecondsPer100k/s["outboxd"].CPUSecondsPer100k)
		}
	}
	if x, ok := ratio("debezium-eos", "debezium"); ok {
		t["exactly-once cost: drain events/s of debezium-eos (KIP-618) over debezium"] = fmt.Sprintf("%.2f x", x)
	}
	if x, ok := ratio("outboxd-eos", "debezium-eos"); ok {
		t["exactly-once: drain events/s of outboxd-eos over debezium-eos"] = fmt.Sprintf("%.2f x", x)
	}
	if x, ok := ratio("outboxd", "relay"); ok {
		t["drain >= 5 x polling relay"] = fmt.Sprintf("%s: %.2f x", verdict(x >= 5), x)
	}
	relayP99 := map[int]float64{}
	for _, l := range r.LatencySum {
		if l.System == "relay" {
			relayP99[l.TargetRate] = l.P99ms
		}
	}
	for _, l := range r.LatencySum {
		if l.System != "outboxd" {
			continue
		}
		p99 := fmt.Sprintf("p99 %.1f ms (median of %d runs; %.1f-%.1f ms)", l.P99ms, l.Runs, l.P99MinMs, l.P99MaxMs)
		switch l.TargetRate {
		case 5000:
			t["p99 <= 5 ms at 5k events/s"] = verdict(l.P99ms <= 5) + ": " + p99 + ackFloor(r, 5000)
		case 10000:
			t["p99 <= 10 ms at 10k events/s"] = verdict(l.P99ms <= 10) + ": " + p99 + ackFloor(r, 10000)
			if rp, ok := relayP99[10000]; ok && rp > 0 {
				t["p99 at 10k events/s <= 1/4 of the relay's"] = fmt.Sprintf("%s: %.2f of the relay's %.1f ms", verdict(l.P99ms <= rp/4), l.P99ms/rp, rp)
			}
		}
		if l.TargetRate >= 1000 && l.TargetRate <= 10000 {
			floor := ""
			for _, w := range r.WakeFloors {
				if w.PerSecond == l.TargetRate/txSize(r) {
					floor = fmt.Sprintf("; this machine's floor for two wake-ups per transaction: %.1f µs per event, so %.1f x the floor", w.FloorUsPerEvent(), l.PublisherCPUMedianUs/w.FloorUsPerEvent())
				}
			}
			for _, f := range r.ProduceFloors {
				if f.Rate == l.TargetRate {
					floor += fmt.Sprintf("; outboxd's producer alone: %.1f µs", f.CPUMedianUs)
				}
			}
			t[fmt.Sprintf("CPU per event <= 10 µs at %d events/s", l.TargetRate)] = fmt.Sprintf("%s: %.1f µs (median of %d runs; %.1f-%.1f)%s",
				verdict(l.PublisherCPUMedianUs <= 10), l.PublisherCPUMedianUs, l.Runs, l.PublisherCPUMinUs, l.PublisherCPUMaxUs, floor)
		}
	}
	for k, v := range lingerTrade(r.LatencySum) {
		t[k] = v
	}
	if rss := s["outboxd"].PeakRSSBytes; rss > 0 {
		t["peak RSS <= 64 MB during the drain"] = fmt.Sprintf("%s: %.1f MiB", verdict(rss <= 64<<20), float64(rss)/(1<<20))
	}
	for _, m := range r.Micro {
		if strings.HasPrefix(m, "BenchmarkDecodeInsert") {
			t["decode allocates nothing per column beyond the record"] = "see micro-benchmark: " + m
		}
	}
	return t
}

// lingerTrade is what --read-linger bought and cost at each steady rate
// measured for both: outboxd-linger's CPU per event as a ratio to
// outboxd's, and both latencies.
func lingerTrade(sum []latencySummary) map[string]string {
	plain := map[int]latencySummary{}
	for _, l := range sum {
		if l.System == "outboxd" {
			plain[l.TargetRate] = l
		}
	}
	t := map[string]string{}
	for _, l := range sum {
		p, ok := plain[l.TargetRate]
		if l.System != "outboxd-linger" || !ok || p.PublisherCPUMedianUs <= 0 {
			continue
		}
		t[fmt.Sprintf("read linger at %d events/s: outboxd-linger over outboxd", l.TargetRate)] = fmt.Sprintf(
			"CPU per event %.2f x (%.1f against %.1f µs), p50 %.1f against %.1f ms (the runs of median p99), p99 %.1f (%.1f-%.1f) against %.1f (%.1f-%.1f) ms",
			l.PublisherCPUMedianUs/p.PublisherCPUMedianUs, l.PublisherCPUMedianUs, p.PublisherCPUMedianUs,
			l.P50ms, p.P50ms, l.P99ms, l.P99MinMs, l.P99MaxMs, p.P99ms, p.P99MinMs, p.P99MaxMs)
	}
	return t
}

// rerender rewrites README.md and chart.svg from results.json.
func rerender(dir string) error {
	r, err := readResults(dir)
	if err != nil {
		return err
	}
	return write(dir, r)
}

// remeasureFloors measures the wake-up floors again at rates into dir's
// results.json, notes when (the report then says they were not measured
// in the systems' session) and re-renders.
func remeasureFloors(ctx context.Context, dir, rates string) error {
	r, err := readResults(dir)
	if err != nil {
		return err
	}
	rs, err := parseRates(rates)
	if err != nil {
		return err
	}
	floors, err := measureWakeFloors(ctx, rs, txSize(r))
	if err != nil {
		return err
	}
	r.WakeFloors = floors
	r.Settings["wake_floors_measured"] = time.Now().UTC().Format(time.RFC3339)
	return write(dir, r)
}

// defaultTxSize is -transaction-size's default, and the size of every run
// recorded before the flag.
const defaultTxSize = 10

// txSize is the run's events per transaction.
func txSize(r Results) int {
	if n, err := strconv.Atoi(r.Settings["transaction_size"]); err == nil && n > 0 {
		return n
	}
	return defaultTxSize
}

func readResults(dir string) (Results, error) {
	var r Results
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, err
	}
	return r, nil
}

// write derives the latency summary and the targets from r's measurements
// and writes results.json, README.md and chart.svg into dir.
func write(dir string, r Results) error {
	r.LatencySum = summarizeLatency(r.Latency)
	r.Targets = targets(r)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "chart.svg"), []byte(chart(r)), 0o644); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := readme.Execute(&b, view(r)); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), b.Bytes(), 0o644)
}

type row struct {
	System                                                         string
	Rate, Ratio, RSS, CPU, InsWAL, DrainWAL, Dead, Upd             string
	Walsender, Busy, WalsenderUs, Startup, FirstRecord, TopicBytes string
}

// streamStart is Settings["drain_timed_from"] in runs whose drains are
// timed from each system's stream start; runs recorded before it timed
// them from the first record in Kafka, and their report says so.
const streamStart = "stream start"

// drainTimedFromStream reports whether r's drains are timed from the
// stream's start.
func drainTimedFromStream(r Results) bool { return r.Settings["drain_timed_from"] == streamStart }

// startupCell is a drain's start-up as the table shows it, saying where
// the stream was not seen and the drain was timed from launch.
func startupCell(s summary) string {
	switch {
	case s.TimedFromLaunch == 0:
		return fmt.Sprintf("%.2f", s.StartupSeconds)
	case s.TimedFromLaunch >= s.Reps:
		return "- (stream not seen: timed from launch)"
	default:
		return fmt.Sprintf("%.2f (%d of %d repetitions timed from launch: stream not seen)", s.StartupSeconds, s.TimedFromLaunch, s.Reps)
	}
}

func view(r Results) map[string]any {
	var rows []row
	order := append([]string{"pg_recvlogical", "outboxd"}, codecSystems...)
	order = append(order, formatSystems...)
	order = append(order, "outboxd-eos", "outboxd-baseline", "outboxd-linger", "debezium", "debezium-eos", "relay")
	for _, sys := range order {
		s, ok := r.Summary[sys]
		if !ok || s.Reps == 0 {
			continue
		}
		rows = append(rows, row{System: sys, Rate: fmt.Sprintf("%.0f", s.EventsPerSec), Ratio: "-",
			RSS: fmt.Sprintf("%.0f", float64(s.PeakRSSBytes)/(1<<20)), CPU: fmt.Sprintf("%.2f", s.CPUSecondsPer100k),
			InsWAL: fmt.Sprintf("%.0f", s.InsertWALPerEvent), DrainWAL: fmt.Sprintf("%.0f", s.DrainWALPerEvent), Dead: fmt.Sprintf("%.2f", s.DeadTuplesPerEvent), Upd: fmt.Sprintf("%.2f", s.UpdatesPerEvent),
			Walsender: "-", WalsenderUs: "-", Busy: fmt.Sprintf("%.0f", 100*s.MachineBusy), Startup: startupCell(s),
			FirstRecord: fmt.Sprintf("%.2f", s.FirstRecordSeconds), TopicBytes: fmt.Sprintf("%.0f", s.TopicBytesPerEvent)})
		if strings.HasPrefix(sys, "debezium") {
			rows[len(rows)-1].RSS += " (JVM heap -Xms1g -Xmx1g)"
		}
		if sys == "pg_recvlogical" {
			rows[len(rows)-1].FirstRecord, rows[len(rows)-1].TopicBytes = "-", "-"
			if !drainTimedFromStream(r) {
				rows[len(rows)-1].Startup = "-" // timed from its launch
			}
		}
		if x, ok := r.RatioToRef[sys]; ok && x > 0 {
			rows[len(rows)-1].Ratio = fmt.Sprintf("%.2f", x)
		}
		if sys != "relay" {
			rows[len(rows)-1].Walsender = fmt.Sprintf("%.2f", s.WalsenderCores)
			rows[len(rows)-1].WalsenderUs = fmt.Sprintf("%.1f", s.WalsenderUsPerEvent)
		}
	}
	var targets []string
	for k, v := range r.Targets {
		targets = append(targets, k+": "+v)
	}
	sort.Strings(targets)
	return map[string]any{"R": r, "Rows": rows, "Targets": targets, "Highest": highestSustained(r.LatencySum), "CPURows": cpuRows(r.LatencySum), "ProduceRows": produceRows(r), "TxSize": txSize(r),
		"StreamTimed": drainTimedFromStream(r)}
}

type cpuRow struct {
	System, Rate, Publisher, Wakeups, Server, Total, VsBaseline, Busy string
}

// cpuRows is the steady CPU per event table, with each system's publisher
// CPU as a ratio to outboxd-baseline's at the same rate.
func cpuRows(sum []latencySummary) []cpuRow {
	base := map[int]float64{}
	for _, l := range sum {
		if l.System == "outboxd-baseline" {
			base[l.TargetRate] = l.PublisherCPUMedianUs
		}
	}
	var rows []cpuRow
	for _, l := range sum {
		row := cpuRow{System: l.System, Rate: fmt.Sprint(l.TargetRate),
			Publisher: fmt.Sprintf("%.1f (%.1f-%.1f)", l.PublisherCPUMedianUs, l.PublisherCPUMinUs, l.PublisherCPUMaxUs),
			Wakeups:   "-", // not counted in runs recorded before it was
			Server:    fmt.Sprintf("%.1f", l.ServerCPUMedianUs), Total: fmt.Sprintf("%.1f", l.PublisherCPUMedianUs+l.ServerCPUMedianUs),
			VsBaseline: "-", Busy: fmt.Sprintf("%.0f", 100*l.MachineBusy)}
		if l.PublisherWakeupsMedian > 0 {
			row.Wakeups = fmt.Sprintf("%.2f", l.PublisherWakeupsMedian)
		}
		if b := base[l.TargetRate]; b > 0 && l.System != "outboxd-baseline" {
			row.VsBaseline = fmt.Sprintf("%.2f", l.PublisherCPUMedianUs/b)
		}
		rows = append(rows, row)
	}
	return rows
}

// produceRow is a line of the producer-alone table: beside outboxd's own
// figures at the same rate.
type produceRow struct{ Rate, Producer, Outboxd, P50, P99 string }

func produceRows(r Results) []produceRow {
	var rows []produceRow
	for _, f := range r.ProduceFloors {
		row := produceRow{Rate: fmt.Sprint(f.Rate), Producer: fmt.Sprintf("%.1f (%.1f-%.1f)", f.CPUMedianUs, f.CPUMinUs, f.CPUMaxUs), Outboxd: "-",
			P50: fmt.Sprintf("%.2f", f.AckP50Ms), P99: fmt.Sprintf("%.2f (%.2f-%.2f)", f.AckP99Ms, f.AckP99MinMs, f.AckP99MaxMs)}
		for _, l := range r.LatencySum {
			if l.System == "outboxd" && l.TargetRate == f.Rate {
				row.Outboxd = fmt.Sprintf("%.1f (%.1f-%.1f)", l.PublisherCPUMedianUs, l.PublisherCPUMinUs, l.PublisherCPUMaxUs)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

var readme = template.Must(template.New("readme").Funcs(template.FuncMap{
	"mul100": func(f float64) float64 { return 100 * f },
	"join":   cmdline.Join,
	// cores: CPU seconds per 100k events at a rate, as cores busy.
	"cores": func(cpuPer100k, rate float64) float64 { return cpuPer100k * rate / 100000 },
	// The command's read linger and when it engages, as package cdc has it.
	"lingerDefault": func() string { return fmt.Sprintf("%g ms", cdc.DefaultReadLinger.Seconds()*1000) },
	"lingerMin":     func() int { return cdc.LingerMinTransactions },
	"lingerFrom":    func() float64 { return cdc.LingerEngagesFrom(cdc.DefaultReadLinger) },
}).Parse(`# Benchmarks: outboxd beside the decoding limit, Debezium and the polling relay

Generated by {{if .R.Args}}` + "`outboxd-bench {{join .R.Args}}`" + `{{else}}` + "`make bench`" + `{{end}} on {{.R.Date}}; raw figures in results.json, chart in chart.svg.
Every system ran against the same private PostgreSQL 15 and Apache Kafka 4.1
(started by harness/testbed/testbed.sh), one after the other, each on a
fresh database whose backlog was written while the system was stopped. A
before/after pair (outboxd and outboxd-baseline) runs its steady rates
interleaved instead: both started together, each repetition of each rate
run by one and then the other, so that the machine's drift over the run
falls on both alike.

Machine: {{range $k, $v := .R.Machine}}{{$k}} {{$v}}; {{end}}
Settings: {{range $k, $v := .R.Settings}}{{$k}} {{$v}}; {{end}}

![throughput and latency](chart.svg)

## Backlog drain (median of the repetitions)

{{if .StreamTimed}}Each drain is timed from the start of the system's stream until the whole
backlog is acknowledged. The stream's start is seen on the server: the
slot's walsender taking the slot (START_REPLICATION) for pg_recvlogical,
outboxd and Debezium, the relay's first connection (its first poll) for
the relay; the bench polls for it every 5 ms and takes the latest moment
known to precede it, so the poll can cost a system at most 5 ms, never
flatter it. The end is the last record acknowledged (outboxd: the slot
confirmed the backlog's end; Debezium: every record in the routed topic;
relay: nothing left unpublished; pg_recvlogical, which decodes the slot to
/dev/null and writes no records: its exit at the backlog's end). A system
that holds records back before its first send is timed with that wait
in: "first record s" is from the stream's start to the first record in
Kafka. "start-up s" is from launching the system to its stream's start,
apart: a user restarting Debezium pays its JVM and Kafka Connect start,
but it is not drain speed. Where the stream was not seen (a drain
shorter than the poll), the drain is timed from launch and the start-up
column says so. CPU per 100k events includes the start-up. The WAL was
{{else}}This run timed each drain from the first record in Kafka (the bench did
so before it saw the stream's start; the first record favours a system
that buffers before its first send) until the whole backlog is
acknowledged (outboxd: the slot confirmed the backlog's end; Debezium:
every record in the routed topic; relay: nothing left unpublished).
"start-up s" is from launching the system to that first record, apart.
CPU per 100k events includes the start-up. pg_recvlogical decodes the slot
to /dev/null, timed from its launch (it writes no records). The WAL was
{{end}}read into the page cache before each timing. "Dead row versions" counts
the rows updated (each UPDATE leaves the old version behind); "dead tuples
left" is what remained after the drain with autovacuum off on the table:
the relay's own reads prune most dead versions as they go. "Walsender
µs/event" is the CPU time of the server process that decodes the slot per
event: 1,000,000 over it is the most one slot can deliver on this machine
with its walsender busy all the time. "Walsender busy" is that CPU over
the drain's duration, which is also the drain rate as a share of that
limit (1.00 = the walsender never waited for its reader); "machine CPU
busy" is the share of both cores' time that was busy during the drain.
"Kafka B/event" is the size of the system's topic on the broker after the
drain over the events: the record batches as sent, so it shows what
compression saves on the wire and on disk (outboxd compresses with snappy
by default; outboxd-none, -gzip, -lz4 and -zstd are outboxd with that
--compression). The payload is synthetic (a number and 200 repeated
characters), so it compresses better than most real events.

| system | {{if .StreamTimed}}drain events/s, stream start to last ack | ratio to pg_recvlogical | start-up s, launch to stream start | first record s, after stream start{{else}}drain events/s, first record to last ack | ratio to pg_recvlogical | start-up s, launch to first record{{end}} | peak RSS MiB | CPU s per 100k events | walsender µs/event | walsender busy, share of the limit | machine CPU busy % | Kafka B/event | insert WAL B/event | WAL written while draining B/event | dead row versions/event | dead tuples left/event |
|---|---|---|---|{{if .StreamTimed}}---|{{end}}---|---|---|---|---|---|---|---|---|---|
{{range .Rows}}| {{.System}} | {{.Rate}} | {{.Ratio}} | {{.Startup}} | {{if $.StreamTimed}}{{.FirstRecord}} | {{end}}{{.RSS}} | {{.CPU}} | {{.WalsenderUs}} | {{.Walsender}} | {{.Busy}} | {{.TopicBytes}} | {{.InsWAL}} | {{.DrainWAL}} | {{.Upd}} | {{.Dead}} |
{{end}}
## Steady latency: commit (as the writer saw it) to receipt by a consumer

Four writers insert transactions of {{.TxSize}} row{{if ne .TxSize 1}}s{{end}} at a fixed rate for the run's
duration (synchronous_commit=on); a consumer notes when each id arrives.
Each rate was run several times after an unmeasured warm-up; the table
shows the run with the median p99 and the p99 of the best and worst run.
"rate reached" is false where the writers themselves could not write the
target rate on this machine (whatever the system under test).

| system | target events/s | written events/s | rate reached | delivered/written | p50 ms | p95 ms | p99 ms | p99 range over runs | max ms | sustained |
|---|---|---|---|---|---|---|---|---|---|---|
{{range .R.LatencySum}}| {{.System}} | {{.TargetRate}} | {{printf "%.0f" .WrittenRate}} | {{.Reached}} | {{.Delivered}}/{{.Written}} | {{printf "%.1f" .P50ms}} | {{printf "%.1f" .P95ms}} | {{printf "%.1f" .P99ms}} | {{printf "%.1f" .P99MinMs}}-{{printf "%.1f" .P99MaxMs}} ({{.Runs}}) | {{printf "%.1f" .Maxms}} | {{.Sustained}} |
{{end}}
### CPU per event at steady rates

The same runs, CPU time per delivered event over each run (each
process's CPU-time clock, which the scheduler keeps to the nanosecond,
read at the run's start and end): "publisher" is the system's own process
(outboxd, Debezium's JVM, the relay); "server" is the PostgreSQL
processes working for it: the slot's walsender for outboxd and Debezium,
the relay's own backends (its SELECT ... FOR UPDATE and UPDATE) for the
relay. The writers' backends are left out for every system: they do the
same work in each. Median over the runs, range in brackets; "vs
outboxd-baseline" divides by the baseline binary's median at the same rate
in the same run (below 1: cheaper). "Publisher wake-ups per transaction"
is how often the publisher's threads went to sleep and were woken (their
voluntary context switches, from /proc, median over the runs) per
transaction written ({{.TxSize}} event{{if ne .TxSize 1}}s{{end}}) ("-": not counted in this run): at these rates a
wake-up costs this machine far more CPU than the events it brings (the
wake-up floors below).

| system | events/s | publisher µs/event | publisher wake-ups per transaction | server µs/event | publisher + server | vs outboxd-baseline | machine CPU busy % (median-p99 run) |
|---|---|---|---|---|---|---|---|
{{range .CPURows}}| {{.System}} | {{.Rate}} | {{.Publisher}} | {{.Wakeups}} | {{.Server}} | {{.Total}} | {{.VsBaseline}} | {{.Busy}} |
{{end}}
### Where outboxd's latency arises

outboxd's own histograms over the run with the median p99 (read from its
/metrics before and after the run; p50 and p99 interpolated inside
power-of-two buckets, so they are estimates): commit to the walsender
sending the commit message (decoding, from the send time in the stream),
commit to outboxd reading it (adds the network and the reader's pacing),
a record handed to the producer to Kafka's acknowledgment, and commit to
acknowledgment. The consumer's p99 in the table above adds the consumer's
fetch wait (10 ms at most).

| system | events/s | stage | transactions or records | p50 ms | p99 ms |
|---|---|---|---|---|---|
{{range .R.LatencySum}}{{$l := .}}{{range .Stages}}| {{$l.System}} | {{$l.TargetRate}} | {{.Stage}} | {{.Count}} | {{printf "%.2f" .P50ms}} | {{printf "%.2f" .P99ms}} |
{{end}}{{end}}
### The floors: what a wake-up and the producer alone cost on this machine

bench/cmd/wakecost, {{with index .R.Settings "wake_floors_measured"}}measured again on {{.}} with
outboxd-bench -floors, after the systems' run, on the same machine{{else}}run in the same session{{end}}: a Go process (GOMAXPROCS 1,
as outboxd runs) woken by one 100-byte TCP message at a time, at each
rate's transaction rate, doing nothing else. Its CPU per message is the
cost of one wake-up (kernel, hypervisor, Go's scheduler), read through
Go's net package and through package rawio's raw system calls, as outboxd
reads (these leave the runtime's monitor thread asleep). A publisher that
sends each transaction on its own, and reads it before the next comes, is
woken twice per transaction: its arrival, then Kafka's acknowledgment a
fraction of a millisecond later. A wake-up soon after another costs less
than one after a long rest, so the floor is measured as such a pair: two
messages 0.5 ms apart (about the acknowledgment's p50 below; half the
interval where transactions come closer) once per transaction, read raw;
with transactions of {{.TxSize}} event{{if ne .TxSize 1}}s{{end}} such a publisher's CPU per event cannot fall
below {{if eq .TxSize 1}}it{{else}}1/{{.TxSize}} of it{{end}}. Where transactions come close together they share
wake-ups (the wake-ups column above counts them), and the pair is then an
estimate, not a floor.
Each figure is the median of 5 runs.

| transactions/s | CPU µs per wake-up, net package | CPU µs per wake-up, raw (as outboxd) | CPU µs per pair of raw wake-ups | pair's gap µs | floor, µs per event |
|---|---|---|---|---|---|
{{range .R.WakeFloors}}| {{.PerSecond}} | {{printf "%.1f" .UsPerWakeup}} | {{if .UsPerWakeupRaw}}{{printf "%.1f" .UsPerWakeupRaw}}{{else}}-{{end}} | {{if .UsPerPairRaw}}{{printf "%.1f" .UsPerPairRaw}}{{else}}- (floor: twice the single){{end}} | {{if .PairGapUs}}{{.PairGapUs}}{{else}}-{{end}} | {{printf "%.1f" .FloorUsPerEvent}} |
{{end}}{{if .R.ProduceFloors}}
bench/cmd/producecost, in the same session as the systems and against the
same broker: outboxd's producer alone (package publish, outboxd's options,
GOMAXPROCS 1) handing over a transaction of {{.TxSize}} record{{if ne .TxSize 1}}s{{end}} at each rate's
transaction rate, each when a 100-byte message arrives on a TCP socket
(read raw, as outboxd reads), with nothing to decode. Its acknowledgment
latency (handed over to acknowledged) is the broker's and the producer's
share of any Kafka publisher's end-to-end latency here. Its CPU per event
is not a floor under outboxd's: it measures its own latencies and
builds every record and its callback afresh (in the recorded runs it
cost more than outboxd at some rates and less at others); it shows what
franz-go's produce path costs with one request per transaction and
nothing else to do.
Median over {{(index .R.ProduceFloors 0).Runs}} runs per rate, range in brackets.

| events/s | producer alone, CPU µs/event | outboxd, CPU µs/event | ack p50 ms | ack p99 ms |
|---|---|---|---|---|
{{range .ProduceRows}}| {{.Rate}} | {{.Producer}} | {{.Outboxd}} | {{.P50}} | {{.P99}} |
{{end}}{{end}}
Highest rate sustained (every event delivered, median p99 under 1 s):
{{range .Highest}}
- {{.}}{{end}}

## Targets

{{range .Targets}}- {{.}}
{{end}}
## Reading the results

{{with index .R.Summary "pg_recvlogical"}}{{if .Reps}}- One slot is one sequential stream, served by one walsender process.
  pg_recvlogical reads each message as it is sent and writes it to
  /dev/null; its walsender is busy {{printf "%.2f" .WalsenderCores}} of a core, and the perf
  profile below shows where: mostly in the kernel, sending every message
  on its own and waking the reader each time, far less in postgres and
  pgoutput decoding. That is the limit of one slot for a client that keeps
  up, and the reference every other figure is a ratio to.
{{end}}{{end}}- outboxd paces its reads (SO_RCVLOWAT follows the stream's rate, about
  1 ms of data per wake-up, at most 2 ms of waiting; inside a transaction it
  waits for what the rest is expected to weigh, at most 1-2 ms): it wakes once per many messages, and its walsender is busy {{with index .R.Summary "outboxd"}}{{printf "%.2f" .WalsenderCores}}{{end}} of a core. The
  walsender, outboxd ({{with index .R.Summary "outboxd"}}{{printf "%.2f" (cores .CPUSecondsPer100k .EventsPerSec)}}{{end}} cores) and the broker share the 2
  cores, and the machine is {{with index .R.Summary "outboxd"}}{{printf "%.0f" (mul100 .MachineBusy)}}{{end}}% busy: CPU is what bounds the
  drain here. Pacing and reusing batches (instead of allocating one per
  transaction) took outboxd from 0.76-0.84 to 0.45-0.68 CPU seconds per
  100k events in an A/B run of the same drain; the Go profile below is
  what remains: reading, decoding and the producer.
{{with index .R.Summary "debezium"}}{{if .Reps}}- Debezium is bound by its own CPU: its JVM uses {{printf "%.2f" .CPUSecondsPer100k}} CPU seconds per
  100k events (its JVM start included), {{printf "%.2f" (cores .CPUSecondsPer100k .EventsPerSec)}} cores at its rate, while its walsender
  mostly waits. Its JVM is started for each drain, as after a restart:
  {{if $.StreamTimed}}{{printf "%.0f" .StartupSeconds}} s to its stream's start, left out of its drain time; from there,
  {{printf "%.1f" .FirstRecordSeconds}} s to its first record in Kafka, counted in it.{{else}}{{printf "%.0f" .StartupSeconds}} s to its first record, left out of its drain time.{{end}}
{{end}}{{end}}{{with index .R.Summary "relay"}}{{if .Reps}}- The polling relay is bound by PostgreSQL: its SELECT ... FOR UPDATE SKIP
  LOCKED and UPDATE run in server backends (machine {{printf "%.0f" (mul100 .MachineBusy)}}% busy). 5 x the
  relay would be several times what one slot delivers to any reader on
  this machine. The relay pays on the database instead: an UPDATE per
  event (WAL while draining, a dead row version per event for pruning and
  vacuum), and its latency waits for a poll at low rates. CDC writes
  nothing.
{{end}}{{end}}- Latency: read the tails beside how busy the machine was (last column of
  the CPU table); on 2 cores, tails of tens to hundreds of milliseconds
  appear where the machine is mostly busy. At the highest
  rates the writers reach on this machine, the 2 cores are saturated by
  PostgreSQL, the writers, the broker, the publisher and the consumer, and
  every tail grows; compare the written rates there too: a system that
  costs less CPU in total lets the writers go faster.
{{if .R.ProduceFloors}}- What bounds the steady figures. CPU: at these rates each transaction
  reaches outboxd on its own and is sent in a produce request of its own,
  so outboxd is woken about twice per transaction where transactions
  come far apart (closer ones share wake-ups); the floor table shows
  what that pair of wake-ups costs on this VM (most of it the
  kernel's and the hypervisor's), and the targets list outboxd's CPU as a
  multiple of it. Above the floor: per transaction, the reads from the
  replication socket (system calls), a produce request and its response,
  and franz-go's goroutines handing each over; decoding is a small share.
  The steady profiles (outboxd-steady-*.pprof, one extra run per rate)
  show where the process's own samples go; they see only part of what
  its CPU clock counts, the rest being the wake-ups' kernel and hypervisor time
  outside the process's threads. Fewer wake-ups
  and requests per event need several transactions per produce request,
  which at 100-500 transactions a second means waiting for them (milliseconds to
  tens of milliseconds); outboxd's --read-linger ({{lingerDefault}} by default) waits
  only where {{lingerMin}} transactions are expected within it, from {{printf "%.0f" lingerFrom}} a second
  (outboxd-linger: another linger, where it was measured). Latency: the stage
  table splits outboxd's: commit to the walsender's send is PostgreSQL's
  (the WAL flush, the walsender's wake-up), handed to the producer to
  Kafka's acknowledgment is the broker's and the producer's, whose p99 the
  producer alone shows without outboxd; what outboxd adds is commit to
  receipt less commit to send.
{{end}}
{{if .R.Errors}}## Not measured

{{range $k, $v := .R.Errors}}- {{$k}}: {{$v}}
{{end}}{{end}}
## Go micro-benchmarks

` + "```" + `
{{range .R.Micro}}{{.}}
{{end}}` + "```" + `

## Walsender profiles during the drain (perf, 3 s, first repetition)

Where the slot's walsender spent its CPU, by binary and by symbol, with each
client: pg_recvlogical reads every message as it is sent, outboxd paces its
reads, Debezium reads through the JDBC driver.
{{range .R.Drains}}{{if .WalsenderPerf}}
### {{.System}}

` + "```" + `
{{.WalsenderPerf}}
` + "```" + `
{{end}}{{end}}
## outboxd CPU profile during the drain (go tool pprof -top)

` + "```" + `
{{.R.Profile}}
` + "```" + `

## Reproduce

    make bench                     # all systems, 1,000,000 events, 3 repetitions
    go run ./bench/cmd/outboxd-bench -h   # flags: -events, -reps, -systems, -rates
`))

// highestSustained states, per system, the highest written rate it kept up
// with, and whether the writers were the limit.
func highestSustained(sum []latencySummary) []string {
	type best struct {
		written float64
		p99     float64
		writers bool // a higher target was not reached by the writers
		failed  int  // lowest target not sustained
	}
	var order []string
	m := map[string]*best{}
	for _, l := range sum {
		b, ok := m[l.System]
		if !ok {
			b = &best{}
			m[l.System] = b
			order = append(order, l.System)
		}
		switch {
		case !l.Sustained:
			if b.failed == 0 || l.TargetRate < b.failed {
				b.failed = l.TargetRate
			}
		case l.WrittenRate > b.written:
			b.written, b.p99 = l.WrittenRate, l.P99ms
		}
		if !l.Reached {
			b.writers = true
		}
	}
	var out []string
	for _, sys := range order {
		b := m[sys]
		s := fmt.Sprintf("%s: %.0f events/s written, p99 %.1f ms", sys, b.written, b.p99)
		switch {
		case b.failed > 0:
			s += fmt.Sprintf("; not sustained at a target of %d/s", b.failed)
		case b.writers:
			s += "; the writers reached no higher rate on this machine, so this is a lower bound"
		default:
			s += "; the highest rate tried"
		}
		out = append(out, s)
	}
	return out
}

// chart draws drain throughput (bars) and p99 latency per rate (bars) as SVG.
func chart(r Results) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="900" height="420" font-family="sans-serif" font-size="12">`+"\n")
	from := "first record"
	if drainTimedFromStream(r) {
		from = "stream start"
	}
	fmt.Fprintf(&b, `<text x="20" y="24" font-size="15">Backlog drain, events/s from %s (median)</text>`+"\n", from)
	order := []string{"pg_recvlogical", "outboxd", "outboxd-eos", "outboxd-baseline", "outboxd-linger", "debezium", "debezium-eos", "relay"}
	colors := map[string]string{"pg_recvlogical": "#888", "outboxd": "#2a7", "outboxd-eos": "#175", "outboxd-baseline": "#9c9", "outboxd-linger": "#5b8",
		"debezium": "#c63", "debezium-eos": "#933", "relay": "#36c"}
	maxRate := 1.0
	for _, s := range r.Summary {
		maxRate = max(maxRate, s.EventsPerSec)
	}
	y := 40
	for _, sys := range order {
		s, ok := r.Summary[sys]
		if !ok || s.Reps == 0 {
			continue
		}
		w := int(270 * s.EventsPerSec / maxRate)
		fmt.Fprintf(&b, `<text x="20" y="%d">%s</text><rect x="120" y="%d" width="%d" height="22" fill="%s"/><text x="%d" y="%d">%.0f</text>`+"\n",
			y+15, sys, y, w, colors[sys], 125+w, y+15, s.EventsPerSec)
		y += 32
	}
	fmt.Fprintf(&b, `<text x="470" y="24" font-size="15">p99 latency, ms (log scale), by write rate</text>`+"\n")
	y = 40
	for _, l := range r.LatencySum {
		w := 0
		if l.P99ms > 0 {
			w = int(60 * (1 + math.Log10(max(l.P99ms, 0.1))))
		}
		fmt.Fprintf(&b, `<text x="470" y="%d">%s %d/s</text><rect x="610" y="%d" width="%d" height="16" fill="%s"/><text x="%d" y="%d">%.1f</text>`+"\n",
			y+12, l.System, l.TargetRate, y, max(w, 1), colors[l.System], 615+max(w, 1), y+12, l.P99ms)
		y += 22
	}
	b.WriteString("</svg>\n")
	return b.String()
}
