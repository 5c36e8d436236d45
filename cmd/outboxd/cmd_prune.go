package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/retention"
)

var pruneGroups = []config.Group{config.GroupDatabase, config.GroupTable, config.GroupSlot, config.GroupPrune, config.GroupLog}

const pruneSynopsis = "Removes outbox rows that are no longer needed: outboxd reads the WAL, not the table, so a row\n" +
	"is needed only until it is published and for as long as a lost slot's recovery might backfill it.\n" +
	"The cutoff is the earlier of now less --older-than and the commit time up to which Kafka\n" +
	"acknowledged everything for --slot (recorded by run in outboxd_slots) less --recovery-margin;\n" +
	"nothing is removed while the slot is lost, its backfill unfinished, or nothing was ever\n" +
	"acknowledged. A partitioned table (migrate --partitioned) loses whole day partitions that end\n" +
	"before the cutoff, and gets the partitions of today and --ahead-days after it; a plain table, and\n" +
	"a DEFAULT partition, are deleted from in batches of --batch-size rows. Run it from cron, e.g.\n" +
	"daily; it is safe to run while outboxd runs, and to run again."

// pruneFlags builds prune's flags on cfg.
func pruneFlags(cfg *config.Config, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("prune", pruneSynopsis, stderr)
	configFlag(fs, "prune every pipeline's table of the file (its table, else public.outbox; its slot), one after another; beside it only "+flagList(pruneBesideConfig))
	cfg.Register(fs, pruneGroups...)
	return fs
}

// cmdPrune keeps the outbox table small (package retention): for cron.
func cmdPrune(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs := pruneFlags(&cfg, stderr)
	if code, ok := parseFlags("prune", fs, args, stderr, getenv); !ok {
		return code
	}
	if path := configPath(fs); path != "" {
		return pruneFile(ctx, path, args, fs, &cfg, stdout, stderr, getenv)
	}
	if code, ok := validate("prune", &cfg, fs, stderr); !ok {
		return code
	}
	log := cfg.Logger(stderr)
	if err := pruneOne(ctx, cfg, stdout, log); err != nil {
		log.Error("outboxd prune failed", "err", err)
		return exitError
	}
	return exitOK
}

// pruneOne prunes the table of cfg for its slot and prints what it did.
func pruneOne(ctx context.Context, cfg config.Config, stdout io.Writer, log *slog.Logger) error {
	conn, err := pgx.Connect(ctx, cfg.Stream.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	pc := cfg.Prune
	pc.Table, pc.Slot = cfg.Outbox.Table, cfg.Stream.Slot
	res, err := retention.Prune(ctx, conn, pc, time.Now(), log)
	if res.Reason != "" {
		fmt.Fprintf(stdout, "cutoff: %s (%s)\n", res.Cutoff.UTC().Format(time.RFC3339Nano), res.Reason)
	}
	prefix := ""
	if pc.DryRun {
		prefix = "would have "
	}
	fmt.Fprintf(stdout, "%screated partitions: %s\n%sdropped partitions: %s\n%sdeleted rows: %d\n",
		prefix, orNone(res.Created), prefix, orNone(res.Dropped), prefix, res.Deleted)
	return err
}
