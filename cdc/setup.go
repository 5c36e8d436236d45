package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/sqlquote"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// setUpSlot runs once before the first session. It never creates a slot
// unless asked (CreateSlot): a slot that is missing is a permanent error
// saying whether it was lost (outboxd_slots records it) and how to
// recover. Asked, it creates the slot and runs the backfill that goes with
// it; a backfill recorded as unfinished (a crash, a lost connection) is run
// again whole from a new slot. All of it happens under slot.Lock, so a
// second outboxd (a standby) waits instead of creating or backfilling too.
func (s *Streamer) setUpSlot(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", authFailure(err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	unlock, err := slot.Lock(ctx, conn, s.cfg.Slot)
	if err != nil {
		return err
	}
	defer unlock()
	// A backfill over a missing or misspelled publication would find
	// nothing and be recorded as done: check it first, as every session does.
	if err := checkPublication(ctx, conn, s.cfg, s.log); err != nil {
		return err
	}
	// A publication that does not publish the configured table would
	// stream without ever publishing its rows.
	if s.cfg.Table != "" {
		if err := slot.CheckCovers(ctx, conn, s.cfg.Publication, s.cfg.Table); err != nil {
			return err
		}
	}
	systemID, timeline, err := IdentifyServer(ctx, s.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	st, err := slot.Read(ctx, conn, s.cfg.Slot)
	if err != nil {
		return err
	}
	if st.InRecovery {
		return permanent(slot.StandbyError(s.cfg.Slot))
	}
	// Slot names are per server: another database's slot is never
	// adopted, recorded, dropped for a backfill or streamed from here.
	if st.OtherDatabase {
		return permanent(slot.OtherDatabaseError(st))
	}
	// An old primary that came back (a newer primary among the URL's
	// hosts) must not get a slot created or a backfill run on it either.
	if err := noNewerPrimary(ctx, s.cfg.DatabaseURL, serverID{systemID: systemID, timeline: timeline}, s.log); err != nil {
		return err
	}
	failover, err := s.cfg.FailoverSlot.CreateFailover(st.ServerVersion)
	if err != nil {
		return permanent(err)
	}
	// Without outboxd_slots a pending backfill would go unseen and its rows
	// unpublished: a role that cannot read it is refused (ErrCatalogDenied).
	rec, found, err := slot.ReadRecord(ctx, conn, s.cfg.Slot)
	if err != nil {
		return permanent(err)
	}
	// Whoever can write outboxd_slots can make run drop the slot (a forged
	// pending backfill) or run the predicate it stores.
	writers, err := slot.OtherWriters(ctx, conn)
	if err != nil {
		return err
	}
	if len(writers) > 0 {
		s.log.Warn("roles other than this one and the table's owner may write outboxd_slots: a pending backfill recorded there makes run drop the slot and run its predicate; "+
			"revoke INSERT, UPDATE, DELETE and TRUNCATE on outboxd_slots from them (docs/operating.md, Least privilege)", "slot", s.cfg.Slot, "roles", strings.Join(writers, ","))
	}
	where := s.cfg.BackfillWhere
	if rec.BackfillPending() {
		if len(writers) > 0 {
			// The record may not be outboxd's: its predicate would run as
			// SQL in outboxd's snapshot, and the slot be dropped for it.
			return permanent(fmt.Errorf("the unfinished backfill of slot %s recorded in outboxd_slots is not run while roles other than this one and the table's owner may write that table (%s): "+
				"revoke INSERT, UPDATE, DELETE and TRUNCATE on outboxd_slots from them and start again", s.cfg.Slot, strings.Join(writers, ", ")))
		}
		if err := slot.CheckBackfillWhere(rec.BackfillWhere); err != nil {
			return permanent(fmt.Errorf("the unfinished backfill of slot %s recorded in outboxd_slots: its backfill_where %w; correct or delete that row", s.cfg.Slot, err))
		}
		// The unfinished backfill's rows are still owed, whatever else
		// this start was asked for.
		where = rec.BackfillWhere
		if s.cfg.BackfillWhere != "" && s.cfg.BackfillWhere != rec.BackfillWhere {
			where = "(" + rec.BackfillWhere + ") OR (" + s.cfg.BackfillWhere + ")"
		}
	}
	// A backfill that cannot keep each key's order is refused before
	// anything is dropped, created or recorded for it (backfill checks
	// again, on the snapshot).
	rerun := found && rec.BackfillPending() && (st.Exists || s.cfg.CreateSlot)
	if where != "" && (rerun || (!st.Exists && s.cfg.CreateSlot)) {
		if _, err := s.backfillTables(ctx, conn); err != nil {
			return err
		}
	}
	switch {
	case rerun:
		// Streaming starts only once the backfill is recorded done, so
		// nothing was ever confirmed from this slot: drop it (PostgreSQL
		// refuses while a process uses it: an error here) and start over.
		s.log.Warn("the backfill that goes with the slot did not finish (the process stopped before Kafka acknowledged all of it): backfilling again from a new slot and snapshot; rows published by the first attempt are sent again",
			"slot", s.cfg.Slot, "backfill_where", where, "created_at", rec.CreatedAt)
		if st.Exists {
			if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_drop_replication_slot($1)`, s.cfg.Slot); err != nil {
				return fmt.Errorf("dropping slot %s to restart its backfill: %w", s.cfg.Slot, err)
			}
		}
	case st.Exists:
		if err := s.adoptSlot(ctx, conn, st, rec, found, systemID, timeline); err != nil {
			return err
		}
		if s.cfg.BackfillWhere != "" {
			s.log.Info("the slot exists: no backfill (--backfill-where applies only when the slot is created)", "slot", s.cfg.Slot)
		}
		if s.cfg.FailoverSlot.AlterFailover(st, s.log) {
			return s.turnFailoverOn(ctx, st)
		}
		return nil
	case !s.cfg.CreateSlot:
		return permanent(slot.LostError(s.cfg.Slot, rec, found, systemID, timeline))
	case found:
		s.log.Warn("the slot was lost: creating it again", "slot", s.cfg.Slot, "created_by", rec.CreatedBy, "created_at", rec.CreatedAt,
			"system_id", rec.SystemID, "timeline", rec.Timeline, "current_system_id", systemID, "current_timeline", timeline)
	}
	newRec := slot.Record{Slot: s.cfg.Slot, SystemID: systemID, Timeline: timeline, CreatedBy: slot.CreatedByRun, BackfillWhere: where}
	if where == "" {
		return s.createSlot(ctx, conn, newRec, failover)
	}
	return s.createSlotWithBackfill(ctx, conn, newRec, failover)
}

// turnFailoverOn makes the existing slot a failover slot
// (ALTER_REPLICATION_SLOT, 17+). PostgreSQL refuses while a process
// streams from the slot: that process is another outboxd, and this one
// waits as its standby; the next start that finds the slot idle turns it on.
func (s *Streamer) turnFailoverOn(ctx context.Context, st slot.Status) error {
	repl, err := connectReplication(ctx, s.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer repl.Close(context.WithoutCancel(ctx))
	_, err = repl.Exec(ctx, "ALTER_REPLICATION_SLOT "+sqlquote.Identifier(s.cfg.Slot)+" ( FAILOVER true )").ReadAll()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		s.log.Info("turned failover on for the slot: standbys with sync_replication_slots = on now keep it", "slot", s.cfg.Slot)
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == "55006": // object_in_use: another process streams from it
		s.log.Warn("cannot turn failover on while another process streams from the slot; the next start that finds it idle will",
			"slot", s.cfg.Slot, "active_pid", st.ActivePID)
		return nil
	default:
		return fmt.Errorf("turning failover on for slot %s: %w", s.cfg.Slot, err)
	}
}

// adoptSlot records an existing slot that outboxd_slots does not know yet,
// and logs a slot that is now on another server (a failover to a standby
// that has it, a restore): slot.Adopt. Its refusal of a slot not
// synchronized across a failover is returned (permanent); failing to
// write the record is only logged.
func (s *Streamer) adoptSlot(ctx context.Context, conn *pgx.Conn, st slot.Status, rec slot.Record, found bool, systemID string, timeline int32) error {
	err := slot.Adopt(ctx, conn, st, rec, found, systemID, timeline, s.log)
	switch {
	case slot.Permanent(err): // not synchronized across a failover
		return permanent(err)
	case err != nil:
		s.log.Warn("could not record the slot in outboxd_slots; a lost slot will not be recognized as lost", "slot", s.cfg.Slot, "err", err)
	}
	return nil
}

// createSlot creates the slot at the current position, without a backfill.
func (s *Streamer) createSlot(ctx context.Context, conn *pgx.Conn, rec slot.Record, failover bool) error {
	lsn, err := slot.Create(ctx, conn, s.cfg.Slot, failover)
	if err != nil {
		return err
	}
	s.log.Warn("created the replication slot: outbox rows committed before now are not published (use --backfill-where to publish them)",
		"slot", s.cfg.Slot, "lsn", lsn, "failover", failover)
	rec.ConsistentPoint = lsn
	if err := slot.SaveRecord(ctx, conn, rec); err != nil {
		s.log.Warn("could not record the slot in outboxd_slots; a lost slot will not be recognized as lost", "slot", s.cfg.Slot, "err", err)
	}
	return nil
}

// createSlotWithBackfill records the backfill as pending, creates the slot
// with an exported snapshot, publishes the matching rows as of that
// snapshot, waits for Kafka, and records the backfill as done. The next
// session starts at the slot's consistent point.
func (s *Streamer) createSlotWithBackfill(ctx context.Context, conn *pgx.Conn, rec slot.Record, failover bool) error {
	// Pending before the slot exists: a crash at any point after this is
	// recognized on the next start, which backfills again.
	if err := slot.SaveRecord(ctx, conn, rec); err != nil {
		return fmt.Errorf("a backfill needs outboxd_slots to survive a crash: %w", err)
	}
	cp, tx, server, walEnd, err := createWithSnapshot(ctx, s.cfg.DatabaseURL, s.cfg.Slot, conn, failover)
	if err != nil {
		return err
	}
	// The backfill's records come from the slot's server: the first
	// session compares its server with this one.
	s.ident.set(server, walEnd)
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only; committed below when all went well
	// The reading waits on Kafka (the pump's window): a statement_timeout
	// meant for the application's queries must not cut it.
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
		return fmt.Errorf("starting the backfill transaction: %w", err)
	}
	s.log.Info("created the replication slot with an exported snapshot; backfilling the rows that match the predicate as of that snapshot",
		"slot", s.cfg.Slot, "consistent_point", cp, "backfill_where", rec.BackfillWhere, "failover", failover)
	rows, err := s.backfill(ctx, tx, rec.BackfillWhere, cp)
	if err != nil {
		return fmt.Errorf("backfilling slot %s (the next start backfills again from a new slot): %w", s.cfg.Slot, err)
	}
	// Everything is read: end the snapshot's transaction before waiting
	// for Kafka, so that it does not sit idle in transaction.
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("ending the backfill transaction: %w", err)
	}
	if err := s.drainBackfill(ctx, cp); err != nil {
		return fmt.Errorf("backfilling slot %s (the next start backfills again from a new slot): %w", s.cfg.Slot, err)
	}
	if err := slot.MarkBackfilled(ctx, conn, s.cfg.Slot, cp, rows); err != nil {
		return fmt.Errorf("backfill of slot %s acknowledged but not recorded (the next start backfills again): %w", s.cfg.Slot, err)
	}
	s.confirmed = cp
	s.log.Info("backfill acknowledged by Kafka; streaming from the slot's consistent point", "slot", s.cfg.Slot, "rows", rows, "consistent_point", cp)
	return nil
}

// errBackfillUnacknowledged: the pump drained without failing, yet its
// watermark did not reach the consistent point.
var errBackfillUnacknowledged = errors.New("not every backfilled record was acknowledged")

// lostSlot is the permanent error for a slot found missing by a session.
func lostSlot(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	rec, found, err := slot.ReadRecord(ctx, conn, cfg.Slot)
	if err != nil {
		return fmt.Errorf("%w: %s (and %w)", slot.ErrMissing, cfg.Slot, err)
	}
	systemID, timeline, err := IdentifyServer(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("%w: %s (and %w)", slot.ErrMissing, cfg.Slot, err)
	}
	return permanent(slot.LostError(cfg.Slot, rec, found, systemID, timeline))
}

// CreateSlotIfEmpty creates the slot with an exported snapshot and checks,
// as of that snapshot, that table holds no row: every row committed
// before the slot's consistent point is in the snapshot, every later one
// in the slot, so an empty snapshot means no row is left out. When table
// holds rows the slot is dropped again and empty is false. (A plain check
// before creating the slot would miss rows committed in between.) mode
// decides whether it is a failover slot.
func CreateSlotIfEmpty(ctx context.Context, url, slotName string, table pgx.Identifier, mode slot.FailoverMode) (lsn outbox.LSN, empty bool, err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, false, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	version, err := slot.ServerVersion(ctx, conn)
	if err != nil {
		return 0, false, err
	}
	failover, err := mode.CreateFailover(version)
	if err != nil {
		return 0, false, err
	}
	lsn, tx, _, _, err := createWithSnapshot(ctx, url, slotName, conn, failover)
	if err != nil {
		return 0, false, err
	}
	err = tx.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+table.Sanitize()+")").Scan(&empty)
	if err != nil {
		err = fmt.Errorf("checking whether %s holds rows: %w", table.Sanitize(), err)
	}
	_ = tx.Rollback(ctx) // read-only
	if err == nil && empty {
		return lsn, true, nil
	}
	if _, derr := conn.Exec(ctx, `SELECT pg_catalog.pg_drop_replication_slot($1)`, slotName); derr != nil {
		err = errors.Join(err, fmt.Errorf("dropping slot %s again: %w", slotName, derr))
	}
	return 0, false, err
}

// createWithSnapshot creates the slot on a replication connection of its
// own with an exported snapshot, and imports that snapshot into a
// read-only REPEATABLE READ transaction on conn (an exported snapshot
// lives only until the connection that created it runs another command).
// It returns the slot's consistent point and the transaction; the
// replication connection is closed. failover (17+ only) makes it a
// failover slot.
func createWithSnapshot(ctx context.Context, url, slotName string, conn *pgx.Conn, failover bool) (outbox.LSN, pgx.Tx, serverID, outbox.LSN, error) {
	repl, err := connectReplication(ctx, url)
	if err != nil {
		return 0, nil, serverID{}, 0, err
	}
	defer repl.Close(context.WithoutCancel(ctx))
	// The server the slot is created on, identified on the same connection.
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return 0, nil, serverID{}, 0, fmt.Errorf("identifying the server: %w", err)
	}
	server := serverID{systemID: sys.SystemID, timeline: sys.Timeline, database: sys.DBName}
	// The option list (PostgreSQL 15+; the legacy EXPORT_SNAPSHOT keyword
	// cannot be combined with FAILOVER, which 17 added).
	options := "(SNAPSHOT 'export')"
	if failover {
		options = "(SNAPSHOT 'export', FAILOVER true)"
	}
	created, err := pglogrepl.CreateReplicationSlot(ctx, repl, slotName, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: options})
	if err != nil {
		return 0, nil, serverID{}, 0, fmt.Errorf("creating replication slot %s with an exported snapshot: %w", slotName, err)
	}
	cp, err := outbox.ParseLSN(created.ConsistentPoint)
	if err != nil {
		return 0, nil, serverID{}, 0, fmt.Errorf("creating replication slot %s: consistent point %q: %w", slotName, created.ConsistentPoint, err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, nil, serverID{}, 0, fmt.Errorf("starting a transaction for the snapshot of slot %s: %w", slotName, err)
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+created.SnapshotName+"'"); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return 0, nil, serverID{}, 0, fmt.Errorf("importing the snapshot of slot %s: %w", slotName, err)
	}
	return cp, tx, server, outbox.LSN(sys.XLogPos), nil
}
