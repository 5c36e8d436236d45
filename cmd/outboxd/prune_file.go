package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/outboxd/outboxd/internal/config"
)

// pruneBesideConfig is what prune takes beside --config, for every
// pipeline: what to remove, and the log's settings.
var pruneBesideConfig = []string{"older-than", "created-column", "recovery-margin", "ahead-days", "batch-size", "lock-timeout", "dry-run", "log-level", "log-format"}

// pruneFile prunes every pipeline's table of the pipelines file at path,
// one after another, each with its database, table and slot (retention is
// per pipeline: each slot's acknowledged position bounds its own table),
// and goes on past a failed one: every failure is reported, and the exit
// code is exitError if any. own is prune's Config, bound to fs, parsed
// from args: what to remove.
func pruneFile(ctx context.Context, path string, args []string, fs *flag.FlagSet, own *config.Config, stdout, stderr io.Writer, getenv func(string) string) int {
	fresh := func() *flag.FlagSet { c := config.Default(); return pruneFlags(&c, io.Discard) }
	f, cfgs, code := fileConfigs("prune", path, args, fs, fresh, pruneBesideConfig, stderr, getenv, func(pl config.Pipeline) config.Config {
		p := pl.Config
		c := p
		c.Prune = own.Prune
		c.Outbox.Table = "public.outbox"
		if p.Stream.Table != "" {
			c.Outbox.Table = p.Stream.Table
		}
		return c
	})
	if code != exitOK {
		return code
	}
	log := own.Logger(stderr)
	var failed []error
	for i, p := range f.Pipelines {
		fmt.Fprintf(stdout, "pipeline %s (%s, table %s, slot %s):\n", p.Name, config.DescribeDatabase(cfgs[i].Stream.DatabaseURL), cfgs[i].Outbox.Table, cfgs[i].Stream.Slot)
		plog := log.With("pipeline", p.Name)
		if err := pruneOne(ctx, cfgs[i], stdout, plog); err != nil {
			plog.Error("outboxd prune failed", "err", err)
			failed = append(failed, fmt.Errorf("pipeline %s: %w", p.Name, err))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(stderr, "outboxd prune: %d of %d pipelines failed:\n%v\n", len(failed), len(f.Pipelines), errors.Join(failed...))
		return exitError
	}
	return exitOK
}

// fileConfigs is the start of a command that acts on every pipeline of
// the pipelines file at path: it refuses the flags beside --config other
// than besides, loads the file (fs: the command's own flags, parsed from
// args), makes each pipeline's Config for the command with adapt, and
// checks each with the command's own flags (fresh), reporting every
// problem by pipeline. code is exitOK when all went well, else the exit
// code, the problems written to stderr.
func fileConfigs(cmd, path string, args []string, fs *flag.FlagSet, fresh func() *flag.FlagSet, besides []string, stderr io.Writer,
	getenv func(string) string, adapt func(config.Pipeline) config.Config) (config.File, []config.Config, int) {
	if err := flagsBesideConfig(fresh, args, besides...); err != nil {
		fmt.Fprintf(stderr, "outboxd %s: %v\n", cmd, err)
		return config.File{}, nil, exitUsage
	}
	f, err := loadPipelinesFile(path, fs, getenv)
	if err != nil {
		return config.File{}, nil, invalidFile(stderr, cmd, path, err)
	}
	cfgs := make([]config.Config, len(f.Pipelines))
	var problems []error
	for i, p := range f.Pipelines {
		cfgs[i] = adapt(p)
		// The command's own checks on the flags it registers; the rest
		// passed as run's when the file loaded.
		if err := cfgs[i].Validate(fresh()); err != nil {
			problems = append(problems, prefixed(fmt.Sprintf("pipeline %q: ", p.Name), err)...)
		}
	}
	if len(problems) > 0 {
		return config.File{}, nil, invalidFile(stderr, cmd, path, errors.Join(problems...))
	}
	return f, cfgs, exitOK
}
