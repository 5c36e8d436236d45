// Command outboxd-soak runs outboxd for a long time at a steady rate with
// a fault every minute or so (the chaos tool's, none that replaces the
// process), samples its memory, goroutines, open files and records in
// flight from /metrics, and checks that none of them grows: what a leak
// would show. It writes docs/soak/{results.json, README.md, chart.svg};
// `make soak` runs it for 20 minutes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/harness/chaos"
	"github.com/outboxd/outboxd/harness/testbed"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// faults are one round of the faults the soak repeats: every kind that
// leaves the same publisher process running.
var faults = []chaos.Fault{chaos.FaultWalsender, chaos.FaultPostgres, chaos.FaultPostgresCrash, chaos.FaultPostgresPartition,
	chaos.FaultPostgresReset, chaos.FaultBroker, chaos.FaultBrokerStall, chaos.FaultKafkaPartition}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outboxd-soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := chaos.Options{Writers: 4, Aggregates: 50, Seed: 3}
	fs.StringVar(&o.Outboxd, "outboxd", "bin/outboxd", "the outboxd binary to run (make build)")
	fs.StringVar(&o.Script, "testbed", "harness/testbed/testbed.sh", "the test bed script that starts PostgreSQL and Kafka")
	d := fs.Duration("duration", 20*time.Minute, "how long to write")
	fs.IntVar(&o.Rate, "rate", 2000, "events a second the writers commit")
	fs.DurationVar(&o.SampleEvery, "sample", 10*time.Second, "how often to sample the publisher")
	every := fs.Duration("fault-every", time.Minute, "about how often a fault comes")
	out := fs.String("out", "docs/soak", "directory for results.json, README.md and chart.svg")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Events = int(d.Seconds()) * o.Rate
	o.Faults = map[chaos.Fault]int{}
	n := int(*d / *every)
	for i := range n {
		o.Faults[faults[i%len(faults)]]++
	}
	o.Log = slog.New(slog.NewTextHandler(stderr, nil))
	if v := os.Getenv(testbed.ScriptEnv); v != "" {
		o.Script = v
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	rep, err := chaos.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "outboxd-soak:", err)
		return 1
	}
	v := judge(rep)
	res := result{Date: started.UTC().Format(time.RFC3339), Duration: d.String(), Rate: o.Rate, Report: rep, Verdict: v}
	if err := write(*out, res); err != nil {
		fmt.Fprintln(stderr, "outboxd-soak:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", strings.Join(v.Lines, "\n"))
	if !rep.OK() || !v.Flat {
		fmt.Fprintln(stderr, "outboxd-soak: FAILED:", strings.Join(append(v.Problems, rep.Problems...), "; "))
		return 1
	}
	return 0
}

type result struct {
	Date     string       `json:"date"`
	Duration string       `json:"duration"`
	Rate     int          `json:"rate"`
	Verdict  verdict      `json:"verdict"`
	Report   chaos.Report `json:"report"`
}

// verdict compares the first and the last third of the samples (after the
// first tenth, the warm-up): a leak grows from one to the other.
type verdict struct {
	Flat     bool     `json:"flat"`
	Lines    []string `json:"lines"`
	Problems []string `json:"problems,omitempty"`
}

// What the last third's median may exceed the first third's by: RSS may
// move with the garbage collector's pacing, the rest not at all beyond a
// few (a goroutine or file per connection being replaced mid-sample).
var tolerance = []struct {
	name   string
	get    func(chaos.Sample) float64
	factor float64
	slack  float64
	unit   string
}{
	{"RSS", func(s chaos.Sample) float64 { return s.RSSBytes / (1 << 20) }, 1.25, 8, "MiB"},
	{"goroutines", func(s chaos.Sample) float64 { return s.Goroutines }, 1, 5, ""},
	{"open files", func(s chaos.Sample) float64 { return s.OpenFDs }, 1, 5, ""},
	{"records in flight", func(s chaos.Sample) float64 { return s.InFlightRecords }, 1, 200, ""},
}

func judge(rep chaos.Report) verdict {
	v := verdict{Flat: true}
	s := rep.Samples
	if len(s) < 12 {
		v.Flat = false
		v.Problems = append(v.Problems, fmt.Sprintf("only %d samples: too few to tell", len(s)))
		return v
	}
	s = s[len(s)/10:]
	third := len(s) / 3
	first, last := s[:third], s[len(s)-third:]
	for _, t := range tolerance {
		a, b := median(first, t.get), median(last, t.get)
		hi := slices.MaxFunc(s, func(x, y chaos.Sample) int { return cmp(t.get(x), t.get(y)) })
		line := fmt.Sprintf("%s: median %.1f%s in the first third, %.1f%s in the last, max %.1f%s", t.name, a, t.unit, b, t.unit, t.get(hi), t.unit)
		v.Lines = append(v.Lines, line)
		if b > a*t.factor+t.slack {
			v.Flat = false
			v.Problems = append(v.Problems, "grows: "+line)
		}
	}
	return v
}

func median(s []chaos.Sample, get func(chaos.Sample) float64) float64 {
	vs := make([]float64, len(s))
	for i, x := range s {
		vs[i] = get(x)
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

func cmp(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func write(dir string, r result) error {
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
	if err := os.WriteFile(filepath.Join(dir, "chart.svg"), []byte(chart(r.Report)), 0o644); err != nil {
		return err
	}
	rep := r.Report
	var b strings.Builder
	fmt.Fprintf(&b, "# Soak: outboxd at a steady rate with a fault a minute\n\n")
	fmt.Fprintf(&b, "Generated by `make soak` (harness/cmd/outboxd-soak) on %s; raw figures in results.json.\n", r.Date)
	fmt.Fprintf(&b, "Writers committed %d events a second for %s (1-20 rows a transaction, about\n", r.Rate, r.Duration)
	fmt.Fprintf(&b, "10%% rolled back) into PostgreSQL %d; one outboxd process published them to one\n", rep.PostgresVersion)
	fmt.Fprintf(&b, "Kafka broker through fault-injecting proxies, through every fault below (none of them\n")
	fmt.Fprintf(&b, "replaces the process, so its figures are one process's). Its resident memory,\n")
	fmt.Fprintf(&b, "goroutines, open files and records in flight were read from /metrics every sample.\n\n")
	fmt.Fprintf(&b, "![samples](chart.svg)\n\n")
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| committed events | %d |\n| lost / leaked / order violations | %d / %d / %d |\n", rep.Committed, rep.Lost, rep.Leaked, rep.OrderViolations)
	fmt.Fprintf(&b, "| duplicates | %d (bound %d) |\n", rep.Duplicates, rep.DuplicateBound)
	var fl []string
	for _, f := range chaos.AllFaults {
		if n := rep.FaultsInjected[f]; n > 0 {
			fl = append(fl, fmt.Sprintf("%d %s", n, f))
		}
	}
	fmt.Fprintf(&b, "| faults | %s |\n| samples | %d |\n| total time | %.0f s |\n\n", strings.Join(fl, ", "), len(rep.Samples), rep.TotalSeconds)
	fmt.Fprintf(&b, "Leak check (the first tenth of the samples is warm-up; the medians of the first\n")
	fmt.Fprintf(&b, "and last third are compared: RSS may grow by 25%% + 8 MiB, goroutines and open files\n")
	fmt.Fprintf(&b, "by 5, records in flight by 200): **%s**.\n\n", map[bool]string{true: "flat", false: "GROWS"}[r.Verdict.Flat])
	for _, l := range r.Verdict.Lines {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	for _, p := range append(r.Verdict.Problems, rep.Problems...) {
		fmt.Fprintf(&b, "- problem: %s\n", p)
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}

// chart draws the four samples over time, one panel each, with a tick at
// every fault.
func chart(rep chaos.Report) string {
	const w, h, pad = 720, 120, 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, w, len(tolerance)*h+20)
	end := rep.TotalSeconds
	if n := len(rep.Samples); n > 0 {
		end = max(end, rep.Samples[n-1].Seconds)
	}
	x := func(sec float64) float64 { return pad + (w-2*pad)*sec/max(end, 1) }
	for i, t := range tolerance {
		top := float64(i*h + 10)
		hi := 1.0
		for _, s := range rep.Samples {
			hi = max(hi, t.get(s))
		}
		y := func(v float64) float64 { return top + h - 25 - (h-35)*v/hi }
		fmt.Fprintf(&b, `<text x="%d" y="%.0f">%s (max %.0f%s)</text>`, pad, top+10, t.name, hi, t.unit)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#999"/>`, pad, y(0), w-pad, y(0))
		for _, f := range rep.FaultsAt {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#e66" stroke-width="0.5"><title>%s</title></line>`, x(f.Seconds), top+14, x(f.Seconds), y(0), f.Fault)
		}
		var pts []string
		for _, s := range rep.Samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.Seconds), y(t.get(s))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#2a6" stroke-width="1.5" points="%s"/>`, strings.Join(pts, " "))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">seconds 0 to %.0f; red: faults</text></svg>`, pad, len(tolerance)*h+15, end)
	return b.String()
}
