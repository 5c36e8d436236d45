package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/outboxd/outboxd/bench/internal/stats"
)

func summarize(runs []result, rates []int) []summary {
	var out []summary
	for _, rate := range rates {
		for _, arm := range []string{armTables, armDatabases} {
			s := summary{Arm: arm, Rate: rate}
			var written, p50, p99, wal, srv, obx []float64
			for _, r := range runs {
				if r.Arm != arm || r.Rate != rate {
					continue
				}
				written, p50, p99 = append(written, r.WrittenRate), append(p50, r.P50ms), append(p99, r.P99ms)
				wal, srv, obx = append(wal, r.WalsenderCPUus), append(srv, r.ServerCPUus), append(obx, r.OutboxdCPUus)
				s.NotDelivered += r.Written - r.Delivered
			}
			s.WrittenRate, s.P50ms, s.P99ms = stats.SpreadOf(written), stats.SpreadOf(p50), stats.SpreadOf(p99)
			s.WalsenderCPUus, s.ServerCPUus, s.OutboxdCPUus = stats.SpreadOf(wal), stats.SpreadOf(srv), stats.SpreadOf(obx)
			out = append(out, s)
		}
	}
	return out
}

func spread(s stats.Spread) string {
	return fmt.Sprintf("%.1f (%.1f-%.1f)", s.Median, s.Min, s.Max)
}

func write(dir string, rep report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %d outbox tables through one slot, against %d databases through %d slots\n\n", rep.Outboxes, rep.Outboxes, rep.Outboxes)
	fmt.Fprintf(&b, "Run %s on PostgreSQL %s, %s cores; `%s`. Arm *tables*: one database, a schema and a default outbox table for each of %d services, "+
		"one publication over them (`migrate --extend-publication`) and one slot, one `outboxd run`. Arm *databases*: %d databases, each with its table, "+
		"publication and slot, one `outboxd run --config` of %d pipelines. The total rate is spread evenly over the %d outboxes (a writer each, %d events a transaction), "+
		"%.0f s a run, the arms interleaved, %d repetitions. CPU per event written, from the first write until the last event arrived: the server's walsenders, "+
		"the whole server (writers' backends included) and outboxd. Latency from the commit, as the writer saw it, to a Kafka consumer's receipt. "+
		"Medians, with the spread (least-most). Raw figures: [results.json](results.json).\n\n",
		rep.When.Format("2006-01-02 15:04 UTC"), rep.PGVersion, rep.Host["cpus"], rep.Command, rep.Outboxes, rep.Outboxes, rep.Outboxes, rep.Outboxes, rep.TxSize,
		rep.DurationS, rep.Summary[0].P99ms.N)
	fmt.Fprintf(&b, "| total rate (ev/s) | arm | written (ev/s) | walsenders µs/ev | server µs/ev | outboxd µs/ev | p50 ms | p99 ms | not delivered |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rep.Summary {
		fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %s | %s | %s | %d |\n", s.Rate, s.Arm, s.WrittenRate.Median,
			spread(s.WalsenderCPUus), spread(s.ServerCPUus), spread(s.OutboxdCPUus), spread(s.P50ms), spread(s.P99ms), s.NotDelivered)
	}
	fmt.Fprintf(&b, "\n| total rate (ev/s) | walsenders, databases / tables | server, databases / tables | outboxd, databases / tables | p99, databases / tables |\n|---|---|---|---|---|\n")
	for i := 0; i+1 < len(rep.Summary); i += 2 {
		t, d := rep.Summary[i], rep.Summary[i+1]
		fmt.Fprintf(&b, "| %d | %.1f | %.2f | %.2f | %.2f |\n", t.Rate, ratio(d.WalsenderCPUus.Median, t.WalsenderCPUus.Median),
			ratio(d.ServerCPUus.Median, t.ServerCPUus.Median), ratio(d.OutboxdCPUus.Median, t.OutboxdCPUus.Median), ratio(d.P99ms.Median, t.P99ms.Median))
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
