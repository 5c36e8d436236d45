// Command fleet-bench measures many pipelines in one outboxd process
// (outboxd run --config, docs/fleet.md) beside as many processes of one
// pipeline each, in one run on private PostgreSQL and Kafka servers started
// through the test bed (issue 39): for both, the time from launch until
// every pipeline streams, the peak RSS and the CPU used while idle; then,
// for the one process, the commit-to-consumer latency and CPU per event of
// a steady rate spread over its pipelines, beside a single pipeline taking
// the whole rate; and a few pipelines in one process beside as many
// Debezium connectors on one Kafka Connect worker at a steady rate; and,
// as the floor under the load's figures, the same slots read at the same
// rate by a process that does nothing with what it receives. It
// writes results.json and README.md into -out (docs/bench/fleet).
//
//	make bench-fleet                                       (the full run)
//	go run ./bench/cmd/fleet-bench -pipelines 10 -reps 2 -idle 10s -out /tmp/fleet   (a trial)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	outboxd, testbed, out string
	pipelines, reps       int
	idle, rateDuration    time.Duration
	rate, txSize          int
	// debezium is bench/debezium/run.sh ("": no Debezium steps); peers
	// the pipelines of those steps and peerRate their load.
	debezium        string
	peers, peerRate int
	// slotReader is bench/cmd/slot-reader's binary ("": no floor steps).
	slotReader string
	// noProcesses leaves step B (a process a pipeline) out: a trial that
	// compares builds of the one process needs A and the single pipeline.
	noProcesses bool
	args        []string // the command line's flags, for the report
}

func main() {
	var o options
	flag.StringVar(&o.outboxd, "outboxd", "bin/outboxd", "outboxd binary")
	flag.StringVar(&o.testbed, "testbed", "harness/testbed/testbed.sh", "test bed script")
	flag.IntVar(&o.pipelines, "pipelines", 100, "pipelines: databases on the one PostgreSQL server, each with its slot and topic")
	flag.IntVar(&o.reps, "reps", 5, "repetitions of every measurement (medians and min-max are reported)")
	flag.DurationVar(&o.idle, "idle", time.Minute, "idle window once every pipeline streams, over which idle CPU is measured")
	flag.IntVar(&o.rate, "rate", 10_000, "steady load, events/s: spread evenly over the pipelines of the one process, and whole on the single pipeline")
	flag.DurationVar(&o.rateDuration, "rate-duration", 10*time.Second, "how long each steady run writes")
	flag.IntVar(&o.txSize, "transaction-size", 10, "events per transaction in the steady runs (outboxd-bench's default)")
	flag.StringVar(&o.debezium, "debezium", "bench/debezium/run.sh", "Debezium launcher script (empty: skip the steps beside Debezium)")
	flag.IntVar(&o.peers, "debezium-pipelines", 10, "pipelines of one outboxd beside as many Debezium connectors on one Kafka Connect worker")
	flag.IntVar(&o.peerRate, "debezium-rate", 1_000, "steady load, events/s, of the steps beside Debezium, spread evenly over their pipelines")
	flag.StringVar(&o.slotReader, "slot-reader", "bin/slot-reader", "slot-reader binary, for the floor steps F and F1 (empty: skip them)")
	flag.StringVar(&o.out, "out", "docs/bench/fleet", "output directory")
	flag.BoolVar(&o.noProcesses, "no-processes", false, "leave out step B (a process a pipeline), e.g. for a trial comparing two builds of the one process")
	render := flag.Bool("render", false, "only re-render README.md from the output directory's results.json")
	flag.Parse()
	o.args = os.Args[1:]
	if *render {
		if err := rerender(o.out); err != nil {
			fmt.Fprintln(os.Stderr, "fleet-bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-bench:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// Ctrl-C and SIGTERM end the run: every outboxd started is stopped and
	// the servers are removed before the command exits.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-bench:", err)
		os.Exit(1)
	}
}

// check refuses flags that make no run.
func (o options) check() error {
	switch {
	case o.pipelines < 1 || o.pipelines > 999:
		return fmt.Errorf("-pipelines %d: must be 1 to 999", o.pipelines)
	case o.reps < 1:
		return fmt.Errorf("-reps %d: must be at least 1", o.reps)
	case o.idle <= 0 || o.rateDuration <= 0:
		return fmt.Errorf("-idle and -rate-duration must be above 0")
	case o.txSize < 1 || o.rate < o.txSize:
		return fmt.Errorf("-transaction-size %d and -rate %d: need 1 <= transaction size <= rate", o.txSize, o.rate)
	case o.debezium != "" && (o.peers < 1 || o.peers > 99):
		return fmt.Errorf("-debezium-pipelines %d: must be 1 to 99", o.peers)
	case o.debezium != "" && o.peerRate < o.txSize:
		return fmt.Errorf("-debezium-rate %d: must be at least the transaction size %d", o.peerRate, o.txSize)
	}
	return nil
}
