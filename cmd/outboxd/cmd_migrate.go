package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/retention"
	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/slot"
)

var migrateGroups = []config.Group{config.GroupDatabase, config.GroupPrimary, config.GroupTable, config.GroupShape, config.GroupPublication, config.GroupSlot, config.GroupCreateSlot, config.GroupColumns, config.GroupLog}

const migrateSynopsis = "Creates the outbox table and the insert-only publication over it (idempotently,\nrecording versions in outboxd_migrations), then, on a fresh install, the pgoutput\nreplication slot (recorded in outboxd_slots), so that every outbox row committed from\nnow on is published even if `run` starts later. It refuses to create a slot that\noutboxd_slots says was lost, or one over a table that already holds rows: see\n--create-slot. With --own-table it leaves an existing table of another shape as it is\nand checks that the column flags fit it. It never changes an existing publication:\none that does not publish --table is refused, naming the ALTER PUBLICATION that adds\nit. A slot of that name in another database of the server is refused too (slot names\nare per server: each database needs its own --slot). Note: a slot nobody reads\nretains WAL on the server until outboxd runs."

// migrateFlags builds migrate's flags on cfg, and its own --print-sql.
func migrateFlags(cfg *config.Config, stderr io.Writer) (fs *flag.FlagSet, printSQL *bool) {
	cfg.Stream.CreateSlot = true // on a fresh install only: see migrateSlot
	fs = newFlagSet("migrate", migrateSynopsis, stderr)
	cfg.Register(fs, migrateGroups...)
	configFlag(fs, "migrate every pipeline of the file, one after another, each with its settings; beside it only "+flagList(migrateBesideConfig))
	return fs, fs.Bool("print-sql", false, "print the SQL migrate would run (for a DBA to apply by hand) and exit; needs no database")
}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs, printSQL := migrateFlags(&cfg, stderr)
	if code, ok := parseFlags("migrate", fs, args, stderr, getenv); !ok {
		return code
	}
	if path := configPath(fs); path != "" {
		return migrateFile(ctx, path, args, fs, &cfg, *printSQL, stdout, stderr, getenv)
	}
	cfg.ApplyLayout(fs)
	if cfg.Shape.Layout == config.LayoutDebezium {
		cfg.Outbox.OwnTable = true // Debezium's outbox is the application's table
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
		printRecovery(stderr, err)
		return exitError
	}
	return exitOK
}

func migrate(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	// slot.Connect: the catalog connection run uses, with its message
	// for refused credentials and without JIT. With a standby decoding
	// (--primary-url), the schema is the primary's: conn is there, the
	// slot the standby's.
	slotConn, err := slot.Connect(ctx, cfg.Stream.DatabaseURL, "outboxd migrate")
	if err != nil {
		return err
	}
	defer slotConn.Close(context.WithoutCancel(ctx))
	conn, onStandby, err := migrateConn(ctx, slotConn, cfg)
	if err != nil {
		return err
	}
	if onStandby {
		defer conn.Close(context.WithoutCancel(ctx))
	}
	// Nothing is applied before what would make migrate fail half-way is
	// checked: the privilege creating the slot needs, and the table's
	// shape.
	if cfg.Stream.CreateSlot {
		if _, err := slot.Identify(ctx, cfg.Stream.DatabaseURL); err != nil {
			var pe *slot.ReplicationPrivilegeError
			if errors.As(err, &pe) {
				return fmt.Errorf("checking that migrate can create the slot, over a replication connection: %w; "+
					"or run migrate with --create-slot=false (create-slot: false in a pipelines file) and let run --create-slot create the slot; nothing was changed", pe)
			}
			return fmt.Errorf("checking that migrate can create the slot, over a replication connection: %w; nothing was changed", err)
		}
	}
	if !cfg.Outbox.OwnTable {
		if err := checkDefaultShape(ctx, conn, cfg); err != nil {
			return err
		}
	}
	if cfg.Outbox.OwnTable {
		// Nothing is applied, nor recorded as applied, for a table that
		// is not there (the default table is created by migration 0001).
		cov, err := slot.ReadCoverage(ctx, conn, cfg.Stream.Publication, cfg.Outbox.Table)
		if err != nil {
			return err
		}
		if !cov.Exists {
			return fmt.Errorf("checking publication %s covers %s: %w: --own-table publishes the application's existing outbox table: "+
				"give its name with --table (default public.outbox), or leave out --own-table to have migrate create the default table", cfg.Stream.Publication, cfg.Outbox.Table, slot.ErrTableMissing)
		}
		// Nor for a table whose columns do not fit the mapping: checked
		// before the publication, outboxd_slots and outboxd_emit exist.
		if err := slot.CheckTable(ctx, conn, cfg.Outbox.Table, cfg.Mapping()); err != nil {
			return err
		}
	}
	applied, err := migrations.Apply(ctx, conn, migrationTarget(cfg), log)
	if err != nil {
		return err
	}
	if cfg.Outbox.Partitioned {
		if err := retention.EnsurePartitioned(ctx, conn, cfg.Outbox.Table, retention.Config{}.WithDefaults().AheadDays, time.Now(), log); err != nil {
			return err
		}
	}
	// The publication may have existed before (migration 0002 leaves an
	// existing one as it is): the table must be in it, or its rows are
	// never published. migrate adds it only when asked
	// (--extend-publication): that changes what every run streaming the
	// publication publishes; the error names the ALTER PUBLICATION that
	// does.
	if err := slot.CheckCovers(ctx, conn, cfg.Stream.Publication, cfg.Outbox.Table, cfg.SlotNames()); err != nil {
		if !errors.Is(err, slot.ErrTableNotPublished) {
			return err
		}
		if !cfg.Outbox.ExtendPublication {
			return fmt.Errorf("%w; or let migrate add it with --extend-publication (extend-publication: true in a pipelines file)", err)
		}
		if err := extendPublication(ctx, conn, cfg.Stream.Publication, cfg.Outbox.Table, log); err != nil {
			return err
		}
	}
	// What run checks at start, checked now: the column mapping fits
	// every table of the publication.
	if _, err := slot.CheckPublication(ctx, conn, cfg.Stream.Publication, cfg.Mapping()); err != nil {
		return err
	}
	if len(applied) == 0 {
		log.Info("schema up to date", "table", cfg.Outbox.Table, "publication", cfg.Stream.Publication)
	}
	if !cfg.Stream.CreateSlot {
		return nil
	}
	if onStandby {
		// The slot is created on the standby, which must first have
		// replayed what was just applied (the publication, the table).
		if err := waitReplayed(ctx, conn, slotConn, log); err != nil {
			return err
		}
	}
	return migrateSlot(ctx, slotConn, cfg, log)
}

// migrateConn returns the connection the schema is applied on: slotConn's
// (the --database-url's) when its server is a primary, else a new one to
// the --primary-url (onStandby; the caller closes it). A standby without
// a primary URL is refused, with what to give.
func migrateConn(ctx context.Context, slotConn *pgx.Conn, cfg config.Config) (conn *pgx.Conn, onStandby bool, err error) {
	st, err := slot.Read(ctx, slotConn, cfg.Stream.Slot)
	if err != nil {
		return nil, false, err
	}
	if !st.InRecovery {
		return slotConn, false, nil
	}
	if err := slot.StandbyRefusal(st, cfg.Stream.PrimaryURL, cfg.SlotNames()); err != nil {
		return nil, false, fmt.Errorf("migrate writes its objects on the primary: %w; nothing was changed", err)
	}
	conn, err = slot.Connect(ctx, cfg.Stream.PrimaryURL, "outboxd migrate")
	if err != nil {
		return nil, false, fmt.Errorf("connecting to the primary: %w", err)
	}
	// What would refuse the slot on the standby refuses before anything
	// is applied on the primary.
	facts, err := slot.ReadStandbyFacts(ctx, slotConn, conn)
	if err == nil {
		err = slot.CheckStandby(facts, cfg.SlotNames())
	}
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, false, fmt.Errorf("%w; nothing was changed", err)
	}
	return conn, true, nil
}

// waitReplayed waits until the standby has replayed the primary's WAL as
// it is now.
func waitReplayed(ctx context.Context, primary, standby *pgx.Conn, log *slog.Logger) error {
	var target string
	if err := primary.QueryRow(ctx, `SELECT pg_catalog.pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		return fmt.Errorf("reading the primary's WAL position: %w", err)
	}
	for waited := time.Duration(0); ; waited += 100 * time.Millisecond {
		var done bool
		if err := standby.QueryRow(ctx, `SELECT coalesce(pg_catalog.pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, target).Scan(&done); err != nil {
			return fmt.Errorf("reading the standby's replay position: %w", err)
		}
		if done {
			return nil
		}
		if waited == 5*time.Second {
			log.Info("waiting for the standby to replay the schema before creating the slot there", "lsn", target)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the standby to replay the primary's WAL up to %s: %w", target, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// extendPublication adds table to the existing publication, while the
// table is empty: pgoutput publishes a row only when its table was in the
// publication as of the row's commit, so rows already there would never
// be published. The table is locked against inserts from the check to the
// change's commit.
func extendPublication(ctx context.Context, conn *pgx.Conn, publication, table string, log *slog.Logger) error {
	id, err := sqlquote.ParseQualified(table)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+id.Sanitize()+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
			return fmt.Errorf("locking %s: %w", table, err)
		}
		var empty bool
		if err := tx.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+id.Sanitize()+")").Scan(&empty); err != nil {
			return fmt.Errorf("checking whether %s holds rows: %w", table, err)
		}
		if !empty {
			return fmt.Errorf("%s already holds rows, which its joining publication %s now would never publish (pgoutput publishes a row only when its table was in the publication at its commit): "+
				"give it a publication and slot of its own (--publication, --slot) and publish its rows with run --create-slot --backfill-where; nothing was changed",
				table, publication)
		}
		if _, err := tx.Exec(ctx, "ALTER PUBLICATION "+sqlquote.Identifier(publication)+" ADD TABLE "+id.Sanitize()); err != nil {
			return fmt.Errorf("adding %s to publication %s: %w", table, publication, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	log.Info("added the table to the publication: its slot streams it from now on", "table", table, "publication", publication)
	return nil
}

// checkDefaultShape refuses, before anything is applied, an existing
// table that is not outboxd's default table: migrate would create the
// publication and record the first migrations, then fail at the
// constraints naming the default table's columns. An application's own
// table needs --own-table.
func checkDefaultShape(ctx context.Context, conn *pgx.Conn, cfg config.Config) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL`, cfg.Outbox.Table).Scan(&exists); err != nil {
		return fmt.Errorf("looking for table %s: %w", cfg.Outbox.Table, err)
	}
	if !exists {
		return nil // migration 0001 creates it
	}
	deflt := config.Default()
	err := slot.CheckTable(ctx, conn, cfg.Outbox.Table, deflt.Mapping())
	if err == nil {
		var hasHeaders bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = $1::regclass AND attname = 'headers' AND attnum > 0 AND NOT attisdropped)`,
			cfg.Outbox.Table).Scan(&hasHeaders); err != nil {
			return fmt.Errorf("reading the columns of %s: %w", cfg.Outbox.Table, err)
		}
		if hasHeaders {
			return nil
		}
		err = errors.New(`no column "headers"`)
	}
	return fmt.Errorf("table %s exists and is not outboxd's default outbox table (%w): if it is the application's own outbox table, "+
		"migrate it with --own-table (own-table: true in a pipelines file) and the column flags that fit it (--id-column, --key-column, --topic-column or --topic-template, --payload-column, ...); nothing was changed",
		cfg.Outbox.Table, err)
}

func migrationTarget(cfg config.Config) migrations.Target {
	return migrations.Target{Table: cfg.Outbox.Table, Publication: cfg.Stream.Publication, OwnTable: cfg.Outbox.OwnTable, Partitioned: cfg.Outbox.Partitioned}
}

// migrateSlot creates the slot on a fresh install only
// (slot.CreateOnFreshInstall): never where outboxd_slots says a slot
// existed and is gone (events committed since are in no slot: recovery is
// run --create-slot --backfill-where), and never over an outbox table that
// already holds rows (they would never be published). An existing slot is
// adopted, as run adopts it.
func migrateSlot(ctx context.Context, conn *pgx.Conn, cfg config.Config, log *slog.Logger) error {
	prov, err := slot.NewProvisioner(slot.ProvisionConfig{
		DatabaseURL:    cfg.Stream.DatabaseURL,
		PrimaryURL:     cfg.Stream.PrimaryURL,
		Slot:           cfg.Stream.Slot,
		Failover:       cfg.Stream.FailoverSlot,
		Create:         slot.CreateOnFreshInstall,
		Table:          cfg.Outbox.Table,
		RecordRequired: true, // migrate has just made outboxd_slots: a record it cannot write is a fault
		Names:          cfg.SlotNames(),
	}, log)
	if err != nil {
		return err
	}
	out, err := prov.Provision(ctx, conn)
	if err != nil {
		return err
	}
	if !out.Created {
		log.Info("replication slot exists", "slot", cfg.Stream.Slot, "confirmed_lsn", out.Status.ConfirmedFlushLSN)
	}
	return nil
}

// printMigrationSQL prints every migration and the slot creation as one
// script a DBA can review and apply (each statement is idempotent).
func printMigrationSQL(w io.Writer, cfg config.Config) error {
	ms, err := migrations.Load(migrationTarget(cfg))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "-- outboxd %s: schema for table %s, publication %s, slot %s.\n", buildVersion(version, readBuildInfo()), cfg.Outbox.Table, cfg.Stream.Publication, cfg.Stream.Slot)
	fmt.Fprintln(w, "-- Each statement is safe to run again. outboxd run needs a role with REPLICATION")
	fmt.Fprintln(w, "-- and CONNECT on the database; it never reads the outbox table itself (see docs/operating.md, Least privilege).")
	fmt.Fprintln(w, "-- outboxd migrate itself also needs REPLICATION when it creates the slot (the default; --create-slot=false leaves it to run).")
	for _, m := range ms {
		fmt.Fprintf(w, "\n-- migration %s\n%s\n", m.Name, strings.TrimSpace(m.SQL))
	}
	if cfg.Stream.CreateSlot {
		fmt.Fprintf(w, "\n-- the replication slot: from now on every committed outbox row is kept for outboxd\n")
		fmt.Fprintf(w, "-- (outboxd run records it in outboxd_slots when it first starts)\n")
		fmt.Fprintf(w, "-- (not where outboxd_slots records the slot: a slot it records that is gone was lost, see docs/recovery.md)\n")
		fmt.Fprintf(w, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')\nWHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %s)\n  AND NOT EXISTS (SELECT 1 FROM outboxd_slots WHERE slot_name = %s);\n",
			sqlquote.Literal(cfg.Stream.Slot), sqlquote.Literal(cfg.Stream.Slot), sqlquote.Literal(cfg.Stream.Slot))
	}
	return nil
}
