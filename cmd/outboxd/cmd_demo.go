package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/demo"
)

const demoSynopsis = "Starts a throwaway PostgreSQL (the local server binaries, else PostgreSQL 17\nbinaries downloaded once from Maven Central) and an in-process Kafka,\nmigrates, runs the publisher, writes sample orders from concurrent writers and\nprints every record a consumer receives, with its commit-to-receipt latency.\nCtrl-C stops everything and removes the temporary cluster."

// demoFlags builds demo's flags on cfg (logging warnings only, by default)
// and its own options.
func demoFlags(cfg *config.Config, stderr io.Writer) (*flag.FlagSet, *demo.Options) {
	cfg.Process.LogLevel = "warn"
	fs := newFlagSet("demo", demoSynopsis, stderr)
	cfg.Register(fs, config.GroupLog)
	var o demo.Options
	fs.IntVar(&o.Writers, "writers", 3, "concurrent writers")
	fs.DurationVar(&o.Interval, "interval", 500*time.Millisecond, "pause of each writer between transactions")
	fs.IntVar(&o.Events, "events", 0, "stop after the consumer received this many records (0: run until Ctrl-C)")
	return fs, &o
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs, o := demoFlags(&cfg, stderr)
	if code, ok := parseFlags("demo", fs, args, stderr, getenv); !ok {
		return code
	}
	if code, ok := validate("demo", &cfg, fs, stderr, positive("writers", o.Writers), positive("interval", int(o.Interval))); !ok {
		return code
	}
	log := cfg.Logger(os.Stderr)
	use := func(srv demo.Servers) config.Config {
		c := cfg
		c.Stream.DatabaseURL = srv.DatabaseURL
		c.Kafka.Brokers = srv.Brokers
		c.Stream.StatusInterval = time.Second
		c.Stream.ShutdownTimeout = 10 * time.Second
		c.Stream.CreateSlot = true // migrate creates it in the fresh cluster
		return c
	}
	err := demo.Run(ctx, *o, stdout,
		func(ctx context.Context, srv demo.Servers) error { return migrate(ctx, use(srv), log) },
		func(ctx context.Context, srv demo.Servers) error { return runPublisher(ctx, use(srv), "", log) })
	if err != nil {
		log.Error("outboxd demo failed", "err", err)
		return exitError
	}
	return exitOK
}

func positive(name string, v int) error {
	if v <= 0 {
		return fmt.Errorf("--%s: must be positive", name)
	}
	return nil
}
