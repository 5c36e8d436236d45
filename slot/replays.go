package slot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cursor is a row's place in a table's write order (package cdc's
// ordering column, then the id): its values as text, as PostgreSQL prints
// them. OrderNull: the ordering column is NULL (such rows come last).
// When the id orders by itself, Order is empty.
type Cursor struct {
	Order     string
	OrderNull bool
	ID        string
}

// Replay is a replay's row in outboxd_replays (migration 0015).
type Replay struct {
	Name      string
	Table     string // the table, as schema.name (quoted where needed)
	Selection string // what it selects, as the replay describes it
	// Upper is the last row the selection held when the replay started:
	// rows written later are the stream's, not the replay's. Zero (ID
	// "") when the selection held none.
	Upper Cursor
	// Page is the last page Kafka acknowledged in full, After its last
	// row (zero before the first), RowsDone the rows of pages 1..Page.
	Page      int64
	After     Cursor
	RowsDone  int64
	RowsTotal int64
	StartedAt time.Time
	Finished  *time.Time
}

// ErrReplayCatalog is matched when outboxd_replays does not exist.
var ErrReplayCatalog = errors.New("table outboxd_replays does not exist: run `outboxd migrate` (version 15)")

// ReadReplay reads the replay named name; found is false when there is none.
func ReadReplay(ctx context.Context, q Querier, name string) (r Replay, found bool, err error) {
	var uo, ui, ao, ai *string
	err = q.QueryRow(ctx, `SELECT table_name, selection, upper_order, upper_null, upper_id, page, after_order, after_null, after_id,
			rows_done, rows_total, started_at, finished_at
		FROM outboxd_replays WHERE replay_name = $1`, name).
		Scan(&r.Table, &r.Selection, &uo, &r.Upper.OrderNull, &ui, &r.Page, &ao, &r.After.OrderNull, &ai,
			&r.RowsDone, &r.RowsTotal, &r.StartedAt, &r.Finished)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Replay{}, false, nil
	case isUndefinedTable(err):
		return Replay{}, false, ErrReplayCatalog
	case err != nil:
		return Replay{}, false, fmt.Errorf("reading replay %s from outboxd_replays: %w", name, err)
	}
	r.Name = name
	r.Upper.Order, r.Upper.ID = deref(uo), deref(ui)
	r.After.Order, r.After.ID = deref(ao), deref(ai)
	return r, true, nil
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// StartReplay records a new replay (Page 0, nothing done).
func StartReplay(ctx context.Context, q Querier, r Replay) error {
	_, err := q.Exec(ctx, `INSERT INTO outboxd_replays (replay_name, table_name, selection, upper_order, upper_null, upper_id, rows_total)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		r.Name, r.Table, r.Selection, orNull(r.Upper.Order), r.Upper.OrderNull, orNull(r.Upper.ID), r.RowsTotal)
	if isUndefinedTable(err) {
		return ErrReplayCatalog
	}
	if err != nil {
		return fmt.Errorf("recording replay %s in outboxd_replays: %w", r.Name, err)
	}
	return nil
}

// ReplayAcknowledged records that Kafka acknowledged the replay's pages up
// to page, whose last row is after; finished when that was the last.
func ReplayAcknowledged(ctx context.Context, q Querier, name string, page int64, after Cursor, rowsDone int64, finished bool) error {
	_, err := q.Exec(ctx, `UPDATE outboxd_replays SET page = $2, after_order = $3, after_null = $4, after_id = $5, rows_done = $6,
			updated_at = now(), finished_at = CASE WHEN $7 THEN now() END
		WHERE replay_name = $1`, name, page, orNull(after.Order), after.OrderNull, orNull(after.ID), rowsDone, finished)
	if err != nil {
		return fmt.Errorf("recording the progress of replay %s in outboxd_replays: %w", name, err)
	}
	return nil
}

// LockReplays takes the session's lock on replaying table (its oid): a
// second replay of the table, from any process, is refused until this
// connection ends (a replay killed with -9 lets go as its connection
// closes). held is false when another session holds it; pid is then that
// session's backend.
func LockReplays(ctx context.Context, conn *pgx.Conn, tableOID uint32) (held bool, pid int32, err error) {
	// The two-key form: the first key marks outboxd's replay locks apart
	// from any lock the application takes on a bare oid.
	const replayLockSpace = 0x6f627278 // "obrx"
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1, $2::oid::int4)`, replayLockSpace, tableOID).Scan(&held); err != nil {
		return false, 0, fmt.Errorf("taking the replay lock of the table: %w", err)
	}
	if held {
		return true, 0, nil
	}
	err = conn.QueryRow(ctx, `SELECT coalesce(min(pid), 0) FROM pg_catalog.pg_locks
		WHERE locktype = 'advisory' AND granted AND classid = $1::int8::oid AND objid = $2 AND objsubid = 2`, replayLockSpace, tableOID).Scan(&pid)
	if err != nil {
		return false, 0, fmt.Errorf("finding who holds the replay lock of the table: %w", err)
	}
	return false, pid, nil
}
