// Command debezium-compare runs Debezium 3.6.1's outbox EventRouter (on
// Kafka Connect, bench/debezium/run.sh) and `outboxd run --layout
// debezium` on the same inserts into Debezium's outbox table, each from a
// slot of its own created before the inserts, and compares every record
// field by field: topic, partition, key, value and headers (in order;
// outboxd's own outboxd.* headers left out), matched by the id header. The timestamp is reported apart: Debezium's is
// when it processed the event. It writes docs/debezium/{README.md,
// results.json}; make compare-debezium runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	var o options
	flag.StringVar(&o.testbed, "testbed", "harness/testbed/testbed.sh", "the test bed script (starts PostgreSQL and Kafka)")
	flag.StringVar(&o.debezium, "debezium", "bench/debezium/run.sh", "Debezium launcher script")
	flag.StringVar(&o.schema, "schema", "bench/debezium/schema.sql", "Debezium's outbox table and publication")
	flag.StringVar(&o.outboxd, "outboxd", "", "outboxd binary (empty: build it)")
	flag.StringVar(&o.out, "out", "docs/debezium", "directory for README.md and results.json")
	flag.StringVar(&o.only, "scenario", "", "run only this scenario")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, "debezium-compare:", err)
		os.Exit(1)
	}
}

type options struct {
	testbed, debezium, schema, outboxd, out, only string
}
