// Command outboxd-bench measures outboxd side by side with the decoding
// limit of one slot (pg_recvlogical), Debezium (Kafka Connect + the Outbox
// Event Router) and the polling relay outboxd replaces, in one run, on the
// same PostgreSQL and Kafka (private ones, started through the test bed).
// It writes docs/bench/results.json, docs/bench/README.md and a chart,
// replacing the current run: move that run under docs/bench/history first
// (docs/bench/history.md says how).
//
//	make bench      (not part of make test)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.outboxd, "outboxd", "bin/outboxd", "outboxd binary")
	flag.StringVar(&o.baseline, "baseline", "", "an earlier outboxd binary, measured as system outboxd-baseline for a before/after in the same run (its steady runs interleave with outboxd's, run by run)")
	flag.StringVar(&o.relay, "relay", "bin/relay", "polling relay binary (bench/cmd/relay)")
	flag.StringVar(&o.testbed, "testbed", "harness/testbed/testbed.sh", "test bed script")
	flag.StringVar(&o.debezium, "debezium", "bench/debezium/run.sh", "Debezium launcher script (empty: skip Debezium)")
	flag.IntVar(&o.events, "events", 1_000_000, "backlog size for the drain")
	flag.IntVar(&o.reps, "reps", 5, "drain repetitions per system (the median is reported)")
	flag.IntVar(&o.txSize, "transaction-size", defaultTxSize, "events per transaction, in the drain's backlog and at the steady rates (1: each event committed on its own, as where an application writes one outbox row per business transaction); -events must be a multiple of it")
	flag.StringVar(&o.systems, "systems", "pg_recvlogical,outboxd,outboxd-eos,debezium,debezium-eos,relay", "systems to measure (outboxd-eos: outboxd with --delivery exactly-once; outboxd-linger: outboxd with --read-linger (-read-linger), its steady runs interleaved with outboxd's; outboxd-none, -gzip, -lz4, -zstd: outboxd with that --compression; debezium-eos: Debezium on a distributed Connect worker with exactly-once source support, KIP-618)")
	flag.StringVar(&o.rates, "rates", "1000,5000,10000,20000,40000", "steady write rates, events/s, for the latency runs (empty: drains only)")
	flag.DurationVar(&o.rateDuration, "rate-duration", 10e9, "how long each steady rate is written")
	flag.DurationVar(&o.readLinger, "read-linger", 10*time.Millisecond, "outboxd-linger's --read-linger")
	flag.IntVar(&o.latencyReps, "latency-reps", 5, "repetitions of each steady rate (the run with the median p99 is reported)")
	flag.StringVar(&o.out, "out", "docs/bench", "output directory")
	flag.BoolVar(&o.perf, "perf", true, "record the walsender with perf during each system's first drain (skipped without perf)")
	flag.BoolVar(&o.steadyProfile, "steady-profile", true, "profile outboxd in one extra, unmeasured run at each steady rate")
	render := flag.Bool("render", false, "only re-render README.md and chart.svg from the output directory's results.json")
	floorsOnly := flag.Bool("floors", false, "only measure the wake-up floors again (no servers needed) at -rates into the output directory's results.json, noting when, and re-render")
	flag.Parse()
	o.args = os.Args[1:]
	if o.txSize < 1 || o.events%o.txSize != 0 {
		fmt.Fprintf(os.Stderr, "outboxd-bench: -transaction-size %d: must be at least 1 and divide -events (%d)\n", o.txSize, o.events)
		os.Exit(2)
	}
	if strings.Contains(o.systems, "outboxd-baseline") && o.baseline == "" {
		fmt.Fprintln(os.Stderr, "outboxd-bench: system outboxd-baseline needs -baseline BINARY")
		os.Exit(2)
	}
	if *render || *floorsOnly {
		var err error
		if *floorsOnly {
			err = remeasureFloors(context.Background(), o.out, o.rates)
		} else {
			err = rerender(o.out)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "outboxd-bench:", err)
			os.Exit(1)
		}
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, "outboxd-bench:", err)
		os.Exit(1)
	}
}
