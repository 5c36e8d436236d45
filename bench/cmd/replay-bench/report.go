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
	Arm            string       `json:"arm"`
	Rate           int          `json:"target_events_per_second"`
	WrittenRate    stats.Spread `json:"written_events_per_second"`
	P50ms          stats.Spread `json:"p50_ms"`
	P99ms          stats.Spread `json:"p99_ms"`
	ReplayRowsPerS stats.Spread `json:"replay_rows_per_second"`
	MachineBusy    stats.Spread `json:"machine_cpu_busy"`
	Lost           int          `json:"events_not_delivered"`
}

func summarize(runs []result, rates []int) []summary {
	var out []summary
	for _, rate := range rates {
		for _, arm := range arms {
			s := summary{Arm: arm, Rate: rate}
			var written, p50, p99, rows, busy []float64
			for _, r := range runs {
				if r.Arm != arm || r.Rate != rate {
					continue
				}
				written, p50, p99 = append(written, r.WrittenRate), append(p50, r.P50ms), append(p99, r.P99ms)
				rows, busy = append(rows, r.ReplayRowsPerS), append(busy, r.MachineBusy)
				s.Lost += r.Written - r.Delivered
			}
			s.WrittenRate, s.P50ms, s.P99ms = stats.SpreadOf(written), stats.SpreadOf(p50), stats.SpreadOf(p99)
			s.ReplayRowsPerS, s.MachineBusy = stats.SpreadOf(rows), stats.SpreadOf(busy)
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
	fmt.Fprintf(&b, "# The stream beside a replay\n\n")
	fmt.Fprintf(&b, "Run %s on PostgreSQL %s, %s; `%s`. One `outboxd run` streams steady writes (%d events a transaction, two writers) "+
		"while nothing else runs and beside `outboxd replay --replay-rate %d`, the two interleaved repetition by repetition, "+
		"then beside an uncapped replay (after the others: an uncapped replay left the stream's p99 high for minutes after it in every arm), %d repetitions of %.0f s at each rate. Each replay re-publishes, from the first, %d rows of the same outbox table "+
		"written (then vacuumed, as autovacuum would) before the bench, to a topic of its own, and is stopped with SIGTERM when the steady run ends; between runs the page cache is written out and the machine left to go idle. "+
		"Latency is the stream's, from the commit, as the writer saw it, to a Kafka consumer's receipt; replay rows/s are the rows Kafka acknowledged; "+
		"busy is the machine's share of CPU time in use. Medians, with the spread (least-most) over the repetitions. Raw figures: [results.json](results.json).\n\n",
		rep.When.Format("2006-01-02 15:04 UTC"), rep.PGVersion, host.Line(rep.Host), rep.Command, rep.TxSize, rep.ReplayRate, rep.Summary[0].P99ms.N, rep.DurationS, rep.Rows)
	fmt.Fprintf(&b, "| stream (ev/s) | beside | written (ev/s) | p50 ms | p99 ms | p99 / no replay | replay rows/s | busy | not delivered |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	var base float64
	for _, s := range rep.Summary {
		if s.Arm == armAlone {
			base = s.P99ms.Median
		}
		fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %.2f | %s | %s | %d |\n", s.Rate, s.Arm, s.WrittenRate.Median,
			s.P50ms.Text("%.1f"), s.P99ms.Text("%.1f"), stats.Ratio(s.P99ms.Median, base), s.ReplayRowsPerS.Text("%.0f"), s.MachineBusy.Text("%.2f"), s.Lost)
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}
