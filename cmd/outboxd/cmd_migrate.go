package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/sqlquote"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/slot"
)

var migrateGroups = []config.Group{config.GroupDatabase, config.GroupTable, config.GroupPublication, config.GroupSlot, config.GroupCreateSlot, config.GroupLog}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs := newFlagSet("migrate", "Creates the outbox table and the insert-only publication over it (idempotently,\nrecording versions in outboxd_migrations), then the pgoutput replication slot, so\nthat every outbox row committed from now on is published even if `run` starts\nlater. Note: a slot nobody reads retains WAL on the server until outboxd runs.", stderr)
	cfg.Register(fs, migrateGroups...)
	printSQL := fs.Bool("print-sql", false, "print the SQL migrate would run (for a DBA to apply by hand) and exit; needs no database")
	if code, ok := parseFlags("migrate", fs, args, stderr, getenv); !ok {
		return code
	}
	if *printSQL {
		if err := printMigrationSQL(stdout, cfg); err != nil {
			fmt.Fprintln(stderr, "outboxd migrate:", err)
			return exitUsage
		}
		return exitOK
	}
	if code, ok := validate("migrate", &cfg, fs, stderr); !ok {
		return code
	}
	log := cfg.Logger(os.Stderr)
	if err := migrate(ctx, cfg, log); err != nil {
		log.Error("outboxd migrate failed", "err", err)
		return exitError
	}
	return exitOK
}

func migrate(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	conn, err := pgx.Connect(ctx, cfg.Stream.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	applied, err := migrations.Apply(ctx, conn, migrations.Target{Table: cfg.Table, Publication: cfg.Stream.Publication}, log)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		log.Info("schema up to date", "table", cfg.Table, "publication", cfg.Stream.Publication)
	}
	if !cfg.Stream.CreateSlot {
		return nil
	}
	info, created, err := slot.Ensure(ctx, conn, cfg.Stream.Slot, true)
	if err != nil {
		return err
	}
	if created {
		log.Info("created replication slot; it retains WAL until `outboxd run` confirms it", "slot", cfg.Stream.Slot, "lsn", info.ConfirmedFlushLSN)
	} else {
		log.Info("replication slot exists", "slot", cfg.Stream.Slot, "confirmed_lsn", info.ConfirmedFlushLSN)
	}
	return nil
}

// printMigrationSQL prints every migration and the slot creation as one
// script a DBA can review and apply (each statement is idempotent).
func printMigrationSQL(w io.Writer, cfg config.Config) error {
	ms, err := migrations.Load(migrations.Target{Table: cfg.Table, Publication: cfg.Stream.Publication})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "-- outboxd %s: schema for table %s, publication %s, slot %s.\n", version, cfg.Table, cfg.Stream.Publication, cfg.Stream.Slot)
	fmt.Fprintln(w, "-- Each statement is safe to run again. outboxd run needs a role with REPLICATION")
	fmt.Fprintln(w, "-- and CONNECT on the database; it never reads the outbox table itself (see README).")
	for _, m := range ms {
		fmt.Fprintf(w, "\n-- migration %s\n%s\n", m.Name, strings.TrimSpace(m.SQL))
	}
	if cfg.Stream.CreateSlot {
		fmt.Fprintf(w, "\n-- the replication slot: from now on every committed outbox row is kept for outboxd\n")
		fmt.Fprintf(w, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')\nWHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %s);\n", sqlquote.Literal(cfg.Stream.Slot), sqlquote.Literal(cfg.Stream.Slot))
	}
	return nil
}
