package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/outboxd/outboxd/internal/config"
)

// migrateBesideConfig is what migrate takes beside --config, for every
// pipeline: what to do (print the SQL, create slots), the table's shape,
// and the log's settings.
var migrateBesideConfig = []string{"print-sql", "create-slot", "own-table", "partitioned", "extend-publication", "log-level", "log-format"}

// migrateFile migrates every pipeline of the pipelines file at path, one
// after another, each with its own settings, and goes on past a failed
// one: every failure is reported, and the exit code is exitError if any.
// With printSQL it prints each pipeline's SQL instead, under a header
// naming the pipeline. own is migrate's Config, bound to fs, parsed from
// args.
func migrateFile(ctx context.Context, path string, args []string, fs *flag.FlagSet, own *config.Config, printSQL bool, stdout, stderr io.Writer, getenv func(string) string) int {
	fresh := func() *flag.FlagSet { c := config.Default(); f, _ := migrateFlags(&c, io.Discard); return f }
	f, cfgs, code := fileConfigs("migrate", path, args, fs, fresh, migrateBesideConfig, stderr, getenv, func(p config.Pipeline) config.Config {
		return migrateConfig(p, *own, set(fs, "create-slot"))
	})
	if code != exitOK {
		return code
	}
	if printSQL {
		for i, p := range f.Pipelines {
			fmt.Fprintf(stdout, "-- ==== pipeline %s: %s ====\n", p.Name, config.DescribeDatabase(cfgs[i].Stream.DatabaseURL))
			if err := printMigrationSQL(stdout, cfgs[i]); err != nil {
				fmt.Fprintf(stderr, "outboxd migrate: pipeline %s: %v\n", p.Name, err)
				return exitUsage
			}
			fmt.Fprintln(stdout)
		}
		return exitOK
	}
	log := own.Logger(stderr)
	var failed []error
	for i, p := range f.Pipelines {
		plog := log.With("pipeline", p.Name)
		plog.Info("migrating", "database", config.DescribeDatabase(cfgs[i].Stream.DatabaseURL), "table", cfgs[i].Outbox.Table,
			"publication", cfgs[i].Stream.Publication, "slot", cfgs[i].Stream.Slot)
		if err := migrate(ctx, cfgs[i], plog); err != nil {
			plog.Error("outboxd migrate failed", "err", err)
			printRecovery(stderr, err)
			failed = append(failed, fmt.Errorf("pipeline %s: %w", p.Name, err))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(stderr, "outboxd migrate: %d of %d pipelines failed:\n%v\n", len(failed), len(f.Pipelines), errors.Join(failed...))
		return exitError
	}
	return exitOK
}

// migrateConfig is what migrate does for one pipeline of a file: the
// pipeline's settings; as the table, run's --table when the pipeline
// gives one, else migrate's; whether to create the slot from migrate's
// --create-slot when given on its command line (ownCreateSlot), else the
// pipeline's create-slot when the file gives one, else migrate's default
// (yes); and the table's shape from migrate's flags or the pipeline's
// keys (own-table, partitioned). The Debezium layout's table is the
// application's own, as without a file.
func migrateConfig(p config.Pipeline, own config.Config, ownCreateSlot bool) config.Config {
	c := p.Config
	c.Outbox.Table = own.Outbox.Table
	if p.Config.Stream.Table != "" {
		c.Outbox.Table = p.Config.Stream.Table
	}
	c.Stream.CreateSlot = own.Stream.CreateSlot
	if !ownCreateSlot && set(p.Flags, "create-slot") {
		c.Stream.CreateSlot = p.Config.Stream.CreateSlot
	}
	c.Outbox.OwnTable = own.Outbox.OwnTable || p.Config.Outbox.OwnTable || p.Config.Shape.Layout == config.LayoutDebezium
	c.Outbox.Partitioned = own.Outbox.Partitioned || p.Config.Outbox.Partitioned
	c.Outbox.ExtendPublication = own.Outbox.ExtendPublication || p.Config.Outbox.ExtendPublication
	return c
}

// prefixed is each of err's problems (errors.Join's) with prefix before it.
func prefixed(prefix string, err error) []error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		out = append(out, fmt.Errorf("%s%w", prefix, e))
	}
	return out
}
