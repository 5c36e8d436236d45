package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/idempotent"
	"github.com/outboxd/outboxd/internal/config"
)

const processedKeysSynopsis = "Maintains the processed_keys table of idempotent consumers (package idempotent):\ncreates it when missing, creates the partitions of today and the next --ahead days,\nand drops the day partitions that ended more than --ttl ago (detached concurrently,\nnever a DELETE). Consumers do the same every hour on their own; run this from cron\nwhen they are told not to. --ttl must exceed the longest time after which a record can\nbe delivered again: the topic's retention.ms if groups may be reset to the start."

// processedKeysOptions are processed-keys's own flags.
type processedKeysOptions struct {
	table string
	ttl   time.Duration
	ahead int
}

// processedKeysFlags builds processed-keys's flags on cfg and its own options.
func processedKeysFlags(cfg *config.Config, stderr io.Writer) (*flag.FlagSet, *processedKeysOptions) {
	fs := newFlagSet("processed-keys", processedKeysSynopsis, stderr)
	cfg.Register(fs, config.GroupDatabase)
	var o processedKeysOptions
	fs.StringVar(&o.table, "processed-keys-table", idempotent.DefaultTable, "the table, optionally schema-qualified")
	fs.DurationVar(&o.ttl, "ttl", idempotent.DefaultTTL, "how long a processed key is kept (whole days are dropped)")
	fs.IntVar(&o.ahead, "ahead", 3, "days ahead whose partitions are created")
	return fs, &o
}

// cmdProcessedKeys maintains the processed_keys table of consumers built
// with package idempotent (which also do it themselves every hour): for
// cron, or for a database whose consumers run with MaintenanceInterval < 0.
func cmdProcessedKeys(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs, o := processedKeysFlags(&cfg, stderr)
	if code, ok := parseFlags("processed-keys", fs, args, stderr, getenv); !ok {
		return code
	}
	extra := []error{}
	if o.ttl < 24*time.Hour {
		extra = append(extra, fmt.Errorf("--ttl (%s): must be at least 24h: keys are kept by whole days", envName("ttl")))
	}
	if o.ahead < 1 {
		extra = append(extra, fmt.Errorf("--ahead (%s): must be at least 1", envName("ahead")))
	}
	if code, ok := validate("processed-keys", &cfg, fs, stderr, extra...); !ok {
		return code
	}
	log := cfg.Logger(stderr)
	conn, err := pgx.Connect(ctx, cfg.Stream.DatabaseURL)
	if err != nil {
		log.Error("outboxd processed-keys failed", "err", fmt.Errorf("connecting to PostgreSQL: %w", err))
		return exitError
	}
	defer conn.Close(context.WithoutCancel(ctx))
	store := idempotent.NewStore(o.table)
	if err := store.Migrate(ctx, conn); err != nil {
		log.Error("outboxd processed-keys failed", "err", err)
		return exitError
	}
	m, err := store.Maintain(ctx, conn, time.Now(), o.ttl, o.ahead)
	if err != nil {
		log.Error("outboxd processed-keys failed", "err", err)
		return exitError
	}
	fmt.Fprintf(stdout, "partitions: %s\ndropped: %s\n", strings.Join(m.Ensured, " "), orNone(m.Dropped))
	return exitOK
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
