package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/outboxd/outboxd/bench/internal/stats"
)

func summarize(runs []result, rates []int, arms []string) []summary {
	var out []summary
	for _, rate := range rates {
		for _, arm := range arms {
			s := summary{Arm: arm, Rate: rate}
			var written, p50, p99, wal, srv, sby, obx []float64
			for _, r := range runs {
				if r.Arm != arm || r.Rate != rate {
					continue
				}
				written, p50, p99 = append(written, r.WrittenRate), append(p50, r.P50ms), append(p99, r.P99ms)
				wal, srv, sby, obx = append(wal, r.WalsenderCPUus), append(srv, r.ServerCPUus), append(sby, r.StandbyCPUus), append(obx, r.OutboxdCPUus)
				s.NotDelivered += r.Written - r.Delivered
			}
			s.WrittenRate, s.P50ms, s.P99ms = stats.SpreadOf(written), stats.SpreadOf(p50), stats.SpreadOf(p99)
			s.WalsenderCPUus, s.ServerCPUus, s.StandbyCPUus, s.OutboxdCPUus = stats.SpreadOf(wal), stats.SpreadOf(srv), stats.SpreadOf(sby), stats.SpreadOf(obx)
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
	if rep.Standby {
		fmt.Fprintf(&b, "With `-standby`, a physical standby of the server replays its WAL in every arm (its CPU is the standby column), and the third arm, "+
			"*databases-on-standby*, has the N slots on the standby (`--primary-url`): the primary's walsenders and CPU are then what is left on the primary.\n\n")
	}
	fmt.Fprintf(&b, "| total rate (ev/s) | arm | written (ev/s) | primary's walsenders µs/ev | primary µs/ev | standby µs/ev | outboxd µs/ev | p50 ms | p99 ms | not delivered |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rep.Summary {
		fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %d |\n", s.Rate, s.Arm, s.WrittenRate.Median,
			spread(s.WalsenderCPUus), spread(s.ServerCPUus), spread(s.StandbyCPUus), spread(s.OutboxdCPUus), spread(s.P50ms), spread(s.P99ms), s.NotDelivered)
	}
	by := map[string]summary{}
	for _, s := range rep.Summary {
		by[fmt.Sprint(s.Rate, s.Arm)] = s
	}
	fmt.Fprintf(&b, "\n| total rate (ev/s) | walsenders, databases / tables | primary, databases / tables | outboxd, databases / tables | p99, databases / tables |\n|---|---|---|---|---|\n")
	for _, rate := range rates(rep.Summary) {
		t, d := by[fmt.Sprint(rate, armTables)], by[fmt.Sprint(rate, armDatabases)]
		fmt.Fprintf(&b, "| %d | %.1f | %.2f | %.2f | %.2f |\n", rate, ratio(d.WalsenderCPUus.Median, t.WalsenderCPUus.Median),
			ratio(d.ServerCPUus.Median, t.ServerCPUus.Median), ratio(d.OutboxdCPUus.Median, t.OutboxdCPUus.Median), ratio(d.P99ms.Median, t.P99ms.Median))
	}
	if rep.Standby {
		fmt.Fprintf(&b, "\n| total rate (ev/s) | primary's walsenders, slots on standby / on primary | primary, on standby / on primary | standby, on standby / on primary | outboxd, on standby / on primary | p99, on standby / on primary |\n|---|---|---|---|---|---|\n")
		for _, rate := range rates(rep.Summary) {
			p, s := by[fmt.Sprint(rate, armDatabases)], by[fmt.Sprint(rate, armDatabasesOnStandby)]
			fmt.Fprintf(&b, "| %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", rate, ratio(s.WalsenderCPUus.Median, p.WalsenderCPUus.Median),
				ratio(s.ServerCPUus.Median, p.ServerCPUus.Median), ratio(s.StandbyCPUus.Median, p.StandbyCPUus.Median),
				ratio(s.OutboxdCPUus.Median, p.OutboxdCPUus.Median), ratio(s.P99ms.Median, p.P99ms.Median))
		}
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// rates are the summaries' rates, in order.
func rates(ss []summary) []int {
	var out []int
	for _, s := range ss {
		if len(out) == 0 || out[len(out)-1] != s.Rate {
			out = append(out, s.Rate)
		}
	}
	return out
}
