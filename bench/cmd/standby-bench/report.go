package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/outboxd/outboxd/bench/internal/host"
	"github.com/outboxd/outboxd/bench/internal/stats"
)

// summary is one arm at one rate over the repetitions.
type summary struct {
	Arm                   string       `json:"arm"`
	Rate                  int          `json:"target_events_per_second"`
	WrittenRate           stats.Spread `json:"written_events_per_second"`
	P99ms                 stats.Spread `json:"p99_ms"`
	P50ms                 stats.Spread `json:"p50_ms"`
	PrimaryCPUus          stats.Spread `json:"primary_cpu_us_per_event"`
	PrimaryWalsenderCPUus stats.Spread `json:"primary_walsender_cpu_us_per_event"`
	StandbyCPUus          stats.Spread `json:"standby_cpu_us_per_event"`
	OutboxdCPUus          stats.Spread `json:"outboxd_cpu_us_per_event"`
	Lost                  int          `json:"events_not_delivered"`
}

func summarize(runs []result, rates []int) []summary {
	var out []summary
	for _, rate := range rates {
		for _, arm := range []string{armPrimary, armStandby} {
			var s summary
			s.Arm, s.Rate = arm, rate
			var written, p99, p50, prim, wal, stby, obx []float64
			for _, r := range runs {
				if r.Arm != arm || r.Rate != rate {
					continue
				}
				written = append(written, r.WrittenRate)
				p99, p50 = append(p99, r.P99ms), append(p50, r.P50ms)
				prim, wal = append(prim, r.PrimaryCPUus), append(wal, r.PrimaryWalsenderCPUus)
				stby, obx = append(stby, r.StandbyCPUus), append(obx, r.OutboxdCPUus)
				s.Lost += r.Written - r.Delivered
			}
			s.WrittenRate, s.P99ms, s.P50ms = stats.SpreadOf(written), stats.SpreadOf(p99), stats.SpreadOf(p50)
			s.PrimaryCPUus, s.PrimaryWalsenderCPUus = stats.SpreadOf(prim), stats.SpreadOf(wal)
			s.StandbyCPUus, s.OutboxdCPUus = stats.SpreadOf(stby), stats.SpreadOf(obx)
			out = append(out, s)
		}
	}
	return out
}

func write(dir string, rep report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := stats.WriteJSON(filepath.Join(dir, "results.json"), rep); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Decoding on a standby: what it takes off the primary\n\n")
	fmt.Fprintf(&b, "Run %s on PostgreSQL %s, %s; `%s`. outboxd with its slot on the primary beside outboxd with its slot on a physical standby of it "+
		"(`--primary-url`), the two interleaved repetition by repetition, %d repetitions of %.0f s at each rate, %d events a transaction, two writers on the primary. "+
		"CPU is per event written, from the first write until the last event arrived: every process of the primary (the writers' backends, "+
		"the walsenders: outboxd's when the slot is there, and the standby's physical one in both arms, the background processes), "+
		"every process of the standby, and outboxd. Latency is from the commit, as the writer saw it, to a Kafka consumer's receipt. "+
		"Medians, with the spread (least-most) over the repetitions. Raw figures: [results.json](results.json).\n\n",
		rep.When.Format("2006-01-02 15:04 UTC"), rep.PGVersion, host.Line(rep.Host), rep.Command, rep.Summary[0].P99ms.N, rep.DurationS, rep.TxSize)
	fmt.Fprintf(&b, "| rate (ev/s) | slot on | written (ev/s) | primary CPU µs/ev | primary walsenders µs/ev | standby CPU µs/ev | outboxd µs/ev | p50 ms | p99 ms | not delivered |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rep.Summary {
		fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %d |\n", s.Rate, s.Arm, s.WrittenRate.Median,
			s.PrimaryCPUus.Text("%.1f"), s.PrimaryWalsenderCPUus.Text("%.1f"), s.StandbyCPUus.Text("%.1f"), s.OutboxdCPUus.Text("%.1f"),
			s.P50ms.Text("%.1f"), s.P99ms.Text("%.1f"), s.Lost)
	}
	fmt.Fprintf(&b, "\n| rate (ev/s) | primary CPU, standby / primary arm | primary walsenders, standby / primary arm | p99, standby / primary arm |\n|---|---|---|---|\n")
	for i := 0; i+1 < len(rep.Summary); i += 2 {
		p, s := rep.Summary[i], rep.Summary[i+1]
		fmt.Fprintf(&b, "| %d | %.2f | %.2f | %.2f |\n", p.Rate, stats.Ratio(s.PrimaryCPUus.Median, p.PrimaryCPUus.Median),
			stats.Ratio(s.PrimaryWalsenderCPUus.Median, p.PrimaryWalsenderCPUus.Median), stats.Ratio(s.P99ms.Median, p.P99ms.Median))
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}
