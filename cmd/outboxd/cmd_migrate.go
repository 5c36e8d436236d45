package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/migrations"
)

func cmdMigrate(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs := newFlagSet("migrate", "Creates the outbox table and the insert-only publication over it (idempotently,\nrecording versions in outboxd_migrations), then the pgoutput replication slot, so\nthat every outbox row committed from now on is published even if `run` starts\nlater. Note: a slot nobody reads retains WAL on the server until outboxd runs.", stderr)
	cfg.Register(fs, config.FlagDatabaseURL, config.FlagTable, config.FlagPublication, config.FlagSlot, config.FlagCreateSlot, config.FlagLogLevel, config.FlagLogFormat)
	if err := config.Parse(fs, args, getenv); err != nil {
		fmt.Fprintln(stderr, "outboxd migrate:", err)
		return parseExit(err)
	}
	if err := cfg.Validate(fs); err != nil {
		fmt.Fprintf(stderr, "outboxd migrate: invalid configuration:\n%v\n", err)
		return exitUsage
	}
	log := cfg.Logger(os.Stderr)
	if err := migrate(ctx, cfg, log); err != nil {
		log.Error("outboxd migrate failed", "err", err)
		return exitError
	}
	return exitOK
}

func migrate(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	conn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	applied, err := migrations.Apply(ctx, conn, migrations.Target{Table: cfg.Table, Publication: cfg.Publication}, log)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		log.Info("schema up to date", "table", cfg.Table, "publication", cfg.Publication)
	}
	if !cfg.CreateSlot {
		return nil
	}
	info, created, err := cdc.EnsureSlot(ctx, conn, cfg.Slot, true)
	if err != nil {
		return err
	}
	if created {
		log.Info("created replication slot; it retains WAL until `outboxd run` confirms it", "slot", cfg.Slot, "lsn", info.ConfirmedFlush)
	} else {
		log.Info("replication slot exists", "slot", cfg.Slot, "confirmed_lsn", info.ConfirmedFlush)
	}
	return nil
}
