package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/outbox"
)

// createWithSnapshot creates the slot on a replication connection of its
// own with an exported snapshot, and imports that snapshot into a
// read-only REPEATABLE READ transaction on conn (an exported snapshot
// lives only until the connection that created it runs another command).
// It returns the slot's consistent point, the transaction, the server the
// slot was created on (identified on the same connection) and its WAL end
// then; the replication connection is closed. failover (17+ only) makes
// it a failover slot.
func createWithSnapshot(ctx context.Context, url, slotName string, conn *pgx.Conn, failover bool) (outbox.LSN, pgx.Tx, ServerID, outbox.LSN, error) {
	repl, err := connectReplication(ctx, url)
	if err != nil {
		return 0, nil, ServerID{}, 0, err
	}
	defer repl.Close(context.WithoutCancel(ctx))
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return 0, nil, ServerID{}, 0, fmt.Errorf("identifying the server: %w", err)
	}
	server := ServerID{SystemID: sys.SystemID, Timeline: sys.Timeline, Database: sys.DBName}
	// The option list (PostgreSQL 15+; the legacy EXPORT_SNAPSHOT keyword
	// cannot be combined with FAILOVER, which 17 added).
	options := "(SNAPSHOT 'export')"
	if failover {
		options = "(SNAPSHOT 'export', FAILOVER true)"
	}
	created, err := pglogrepl.CreateReplicationSlot(ctx, repl, slotName, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: options})
	if err != nil {
		return 0, nil, ServerID{}, 0, fmt.Errorf("creating replication slot %s with an exported snapshot: %w", slotName, err)
	}
	cp, err := outbox.ParseLSN(created.ConsistentPoint)
	if err != nil {
		return 0, nil, ServerID{}, 0, fmt.Errorf("creating replication slot %s: consistent point %q: %w", slotName, created.ConsistentPoint, err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, nil, ServerID{}, 0, fmt.Errorf("starting a transaction for the snapshot of slot %s: %w", slotName, err)
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+created.SnapshotName+"'"); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return 0, nil, ServerID{}, 0, fmt.Errorf("importing the snapshot of slot %s: %w", slotName, err)
	}
	return cp, tx, server, outbox.LSN(sys.XLogPos), nil
}

// createIfEmpty creates the slot with an exported snapshot and checks, as
// of that snapshot, that table holds no row: every row committed before
// the slot's consistent point is in the snapshot, every later one in the
// slot, so an empty snapshot means no row is left out. When table holds
// rows the slot is dropped again and empty is false. (A plain check
// before creating the slot would miss rows committed in between.)
func createIfEmpty(ctx context.Context, url, slotName string, conn *pgx.Conn, table pgx.Identifier, failover bool) (lsn outbox.LSN, empty bool, err error) {
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

// turnFailoverOn makes the existing slot a failover slot
// (ALTER_REPLICATION_SLOT, 17+). PostgreSQL refuses while a process
// streams from the slot: that process is another outboxd, and this one
// waits as its standby; the next start that finds the slot idle turns it on.
func turnFailoverOn(ctx context.Context, url string, st Status, log *slog.Logger) error {
	repl, err := connectReplication(ctx, url)
	if err != nil {
		return err
	}
	defer repl.Close(context.WithoutCancel(ctx))
	_, err = repl.Exec(ctx, "ALTER_REPLICATION_SLOT "+sqlquote.Identifier(st.Slot)+" ( FAILOVER true )").ReadAll()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		log.Info("turned failover on for the slot: standbys with sync_replication_slots = on now keep it", "slot", st.Slot)
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == "55006": // object_in_use: another process streams from it
		log.Warn("cannot turn failover on while another process streams from the slot; the next start that finds it idle will",
			"slot", st.Slot, "active_pid", st.ActivePID)
		return nil
	default:
		return fmt.Errorf("turning failover on for slot %s: %w", st.Slot, err)
	}
}
