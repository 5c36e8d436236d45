package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/slot"
)

const statusSynopsis = "Shows the replication slot and the publication: whether the slot is active and by\nwhich pid (or paused by outboxd, since when), its confirmed position, the lag and the WAL it retains, wal_status and\nsafe_wal_size, on PostgreSQL 16+ conflicting, on 17+ invalidation_reason, failover\n(the slot is synchronized to standbys) and synced (a standby's copy of a primary's\nfailover slot), and the publication's tables. Works on a standby too (positions\nare then its replay position). Exits 1 when the slot is missing, was invalidated or\nbelongs to another database of the server (slot names are per server)."

// statusFlags builds status's flags on cfg, and its own --json.
func statusFlags(cfg *config.Config, stderr io.Writer) (fs *flag.FlagSet, asJSON *bool) {
	fs = newFlagSet("status", statusSynopsis, stderr)
	cfg.Register(fs, config.GroupDatabase, config.GroupPrimary, config.GroupSlot, config.GroupPublication)
	configFlag(fs, "the status of every pipeline of the file, each under its name (with --json: a list of {pipeline, status} or {pipeline, error}); exit 1 when any slot is missing or invalidated; beside it only --json")
	return fs, fs.Bool("json", false, "print JSON instead of a table")
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs, asJSON := statusFlags(&cfg, stderr)
	if code, ok := parseFlags("status", fs, args, stderr, getenv); !ok {
		return code
	}
	if path := configPath(fs); path != "" {
		return statusFile(ctx, path, args, fs, *asJSON, stdout, stderr, getenv)
	}
	if code, ok := validate("status", &cfg, fs, stderr); !ok {
		return code
	}
	st, err := readStatus(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "outboxd status: %v\n", err)
		return exitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	} else {
		printStatus(stdout, st)
	}
	if problem := slotProblem(cfg, st); problem != "" {
		fmt.Fprintf(stderr, "outboxd status: %s\n", problem)
		return exitError
	}
	return exitOK
}

// readStatus reads the status of cfg's slot and publication.
func readStatus(ctx context.Context, cfg config.Config) (slot.Status, error) {
	conn, err := pgx.Connect(ctx, cfg.Stream.DatabaseURL)
	if err != nil {
		return slot.Status{}, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return slot.ReadStatus(ctx, conn, cfg.Stream.Slot, cfg.Stream.Publication)
}

// slotProblem is what makes status exit 1: a slot that is missing, was
// invalidated or belongs to another database ("" when none).
func slotProblem(cfg config.Config, st slot.Status) string {
	switch {
	case !st.Exists && st.InRecovery:
		return fmt.Sprintf("replication slot %s is not on this standby (a slot is here when run or migrate created it with --primary-url to decode here, PostgreSQL 16+, "+
			"or when it is a failover slot synchronized with sync_replication_slots = on, PostgreSQL 17+)", cfg.Stream.Slot)
	case !st.Exists:
		return fmt.Sprintf("replication slot %s does not exist (run `outboxd migrate`)", cfg.Stream.Slot)
	case st.OtherDatabase:
		return slot.OtherDatabaseError(st, cfg.SlotNames()).Error()
	case st.Lost():
		return fmt.Sprintf("replication slot %s was invalidated (%s): outbox rows may be missing from Kafka", cfg.Stream.Slot, st.Why())
	}
	return ""
}

func printStatus(w io.Writer, st slot.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "slot\t%s\n", st.Slot)
	if !st.Exists {
		fmt.Fprintf(tw, "exists\tno\n")
	} else {
		active := "no"
		if st.Active {
			active = fmt.Sprintf("yes, pid %d", st.ActivePID)
			if st.ActiveApplication != "" {
				active += fmt.Sprintf(" (%s)", st.ActiveApplication)
			}
		}
		database := st.Database
		if st.OtherDatabase {
			database = fmt.Sprintf("%s (another database: not this database's slot; this is %s)", st.Database, st.CurrentDatabase)
		}
		fmt.Fprintf(tw, "plugin\t%s\ndatabase\t%s\nactive\t%s\n", st.Plugin, database, active)
		if st.PausedAt != nil {
			fmt.Fprintf(tw, "paused\tsince %s (an outboxd pipeline's paused setting; it resumes from confirmed_flush_lsn)\n", st.PausedAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "confirmed_flush_lsn\t%s\ncurrent_wal_lsn\t%s\n", st.Confirmed, st.Current)
		fmt.Fprintf(tw, "lag\t%s\nretained WAL\t%s\n", bytesText(st.LagBytes), bytesText(st.RetainedWALBytes))
		fmt.Fprintf(tw, "wal_status\t%s\n", st.WALStatus)
		if st.SafeWALSize != nil {
			fmt.Fprintf(tw, "safe_wal_size\t%s\n", bytesText(*st.SafeWALSize))
		} else {
			fmt.Fprintf(tw, "safe_wal_size\tunlimited (max_slot_wal_keep_size = -1)\n")
		}
		if st.Conflicting != nil {
			fmt.Fprintf(tw, "conflicting\t%s\n", yesNo(*st.Conflicting))
		}
		if st.Failover != nil {
			fmt.Fprintf(tw, "invalidation_reason\t%s\n", noneIfEmpty(st.InvalidationReason))
			fmt.Fprintf(tw, "failover\t%s\n", yesNo(*st.Failover))
		}
		if st.Synced != nil {
			fmt.Fprintf(tw, "synced\t%s\n", yesNo(*st.Synced))
		}
	}
	if st.InRecovery {
		fmt.Fprintf(tw, "server\tstandby (in recovery): current_wal_lsn is its replay position\n")
	}
	if st.Exists && !st.OtherDatabase {
		decoding := "on the primary"
		if st.InRecovery {
			decoding = "on this standby (its walsender decodes; outboxd writes its catalog on the primary)"
		}
		fmt.Fprintf(tw, "decoding\t%s\n", decoding)
	}
	fmt.Fprintf(tw, "publication\t%s\n", st.Publication)
	if !st.PublicationExists {
		fmt.Fprintf(tw, "publication exists\tno (run `outboxd migrate`)\n")
	}
	for _, t := range st.Tables {
		fmt.Fprintf(tw, "table\t%s\n", t)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d bytes (%.1f GiB)", n, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
