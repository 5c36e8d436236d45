package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
)

// Record is what the outboxd_slots table (migration 0005) holds about a
// slot outboxd created: where, when and how, so that a slot that vanished
// is told apart from one that never existed.
type Record struct {
	Slot      string
	SystemID  string // the server's system identifier when the slot was created (or last seen)
	Timeline  int32  // and its timeline
	CreatedAt time.Time
	CreatedBy string // "migrate", "run --create-slot", or "adopted" (a slot that existed before the catalog)
	// ConsistentPoint is where the slot's stream began (0: not known).
	ConsistentPoint outbox.LSN
	// BackfillWhere is the predicate of the backfill that goes with the
	// slot ("" when none); BackfillDone says Kafka acknowledged all of it.
	BackfillWhere string
	BackfillDone  bool
	BackfillRows  int64
	// AcknowledgedCommitTime is the commit time up to which Kafka
	// acknowledged every record, as run last recorded it (zero when never).
	AcknowledgedCommitTime time.Time
}

// BackfillPending reports whether the slot came with a backfill that Kafka
// has not acknowledged in full.
func (r Record) BackfillPending() bool { return r.BackfillWhere != "" && !r.BackfillDone }

// Who created a slot, as recorded in outboxd_slots.created_by.
const (
	CreatedByMigrate = "migrate"
	CreatedByRun     = "run --create-slot"
	CreatedByAdopted = "adopted"
)

// ErrCatalogDenied is matched by the errors of reads of outboxd_slots that
// the role may not do (a role with only REPLICATION and CONNECT).
var ErrCatalogDenied = errors.New("permission denied on table outboxd_slots: grant SELECT, INSERT, UPDATE ON outboxd_slots to outboxd's role, so that a lost slot and an unfinished backfill are seen")

// ErrNoCatalog is matched by the errors of writes to outboxd_slots when
// the table does not exist (migrate has not run since version 0005).
var ErrNoCatalog = errors.New("table outboxd_slots does not exist: run `outboxd migrate`")

// ReadRecord reads the slot's record. found is false when there is none,
// also when the table does not exist (a schema older than migration 0005).
func ReadRecord(ctx context.Context, q Querier, slot string) (rec Record, found bool, err error) {
	var consistent, where *string
	var done, acked *time.Time
	var rows *int64
	err = q.QueryRow(ctx, `SELECT system_identifier, timeline, created_at, created_by, consistent_point::text,
			backfill_where, backfill_done_at, backfill_rows, acknowledged_commit_time
		FROM outboxd_slots WHERE slot_name = $1`, slot).
		Scan(&rec.SystemID, &rec.Timeline, &rec.CreatedAt, &rec.CreatedBy, &consistent, &where, &done, &rows, &acked)
	switch {
	case errors.Is(err, pgx.ErrNoRows), isUndefinedTable(err):
		return Record{}, false, nil
	case isPermissionDenied(err):
		return Record{}, false, fmt.Errorf("reading outboxd_slots for slot %s: %w", slot, ErrCatalogDenied)
	case err != nil:
		return Record{}, false, fmt.Errorf("reading outboxd_slots for slot %s: %w", slot, err)
	}
	rec.Slot = slot
	if consistent != nil {
		rec.ConsistentPoint, _ = outbox.ParseLSN(*consistent)
	}
	if where != nil {
		rec.BackfillWhere = *where
	}
	rec.BackfillDone = done != nil
	if rows != nil {
		rec.BackfillRows = *rows
	}
	if acked != nil {
		rec.AcknowledgedCommitTime = *acked
	}
	return rec, true, nil
}

// SaveRecord writes the record of a slot just created or adopted (replacing
// an older one of the same name: that slot is gone).
func SaveRecord(ctx context.Context, q Querier, r Record) error {
	var consistent, where *string
	if r.ConsistentPoint != 0 {
		s := r.ConsistentPoint.String()
		consistent = &s
	}
	if r.BackfillWhere != "" {
		where = &r.BackfillWhere
	}
	_, err := q.Exec(ctx, `INSERT INTO outboxd_slots (slot_name, system_identifier, timeline, created_by, consistent_point, backfill_where)
		VALUES ($1, $2, $3, $4, $5::pg_lsn, $6)
		ON CONFLICT (slot_name) DO UPDATE SET system_identifier = excluded.system_identifier, timeline = excluded.timeline,
			created_at = now(), created_by = excluded.created_by, consistent_point = excluded.consistent_point,
			backfill_where = excluded.backfill_where, backfill_done_at = NULL, backfill_rows = NULL, acknowledged_commit_time = NULL`,
		r.Slot, r.SystemID, r.Timeline, r.CreatedBy, consistent, where)
	return catalogWriteError("recording slot "+r.Slot+" in outboxd_slots", err)
}

// MarkBackfilled records that Kafka acknowledged the slot's backfill of
// rows rows, before the slot's consistent point.
func MarkBackfilled(ctx context.Context, q Querier, slot string, consistentPoint outbox.LSN, rows int64) error {
	_, err := q.Exec(ctx, `UPDATE outboxd_slots SET backfill_done_at = now(), backfill_rows = $2, consistent_point = $3::pg_lsn WHERE slot_name = $1`,
		slot, rows, consistentPoint.String())
	return catalogWriteError("recording the backfill of slot "+slot+" as done", err)
}

// Adopt keeps the record of the existing slot st current: a slot without
// a record (created before outboxd_slots, or by hand) is recorded as
// adopted, and one recorded on another server (a failover to a standby
// that has the slot, or a restore) is logged with both servers and
// recorded on this one. A slot on a new timeline of the system it was
// recorded on that was not synchronized from the old primary
// (SyncedAcrossFailover) is refused with UnsyncedError, wrapping
// ErrUnusable, and its record left as it is: recording it as moved would
// hide it from the next check. decodingOnStandby says the slot is kept on
// a server outboxd was told is (or was) a standby decoding for it: a new
// timeline there is that server's own promotion, and its slot the one
// outboxd confirmed on (TrustedAcrossTimeline).
func Adopt(ctx context.Context, q Querier, st Status, rec Record, found bool, systemID string, timeline int32, decodingOnStandby bool, n field.Names, log *slog.Logger) error {
	slot := st.Slot
	switch {
	case found && rec.SystemID == systemID && rec.Timeline != timeline && !TrustedAcrossTimeline(st, decodingOnStandby):
		return UnsyncedError(slot, rec, timeline, st.ServerVersion, n)
	case !found:
		return SaveRecord(ctx, q, Record{Slot: slot, SystemID: systemID, Timeline: timeline, CreatedBy: CreatedByAdopted})
	case rec.SystemID != systemID || rec.Timeline != timeline:
		log.Warn("the slot is on another server than when it was recorded (a failover to a standby that has the slot, or a restore)",
			"slot", slot, "system_id", systemID, "timeline", timeline, "recorded_system_id", rec.SystemID, "recorded_timeline", rec.Timeline)
		return MoveRecord(ctx, q, slot, systemID, timeline)
	}
	return nil
}

// MoveRecord records the server the slot is on now (a failover to a
// standby that has the slot, or a restore).
func MoveRecord(ctx context.Context, q Querier, slot, systemID string, timeline int32) error {
	_, err := q.Exec(ctx, `UPDATE outboxd_slots SET system_identifier = $2, timeline = $3 WHERE slot_name = $1`, slot, systemID, timeline)
	return catalogWriteError("recording the server of slot "+slot, err)
}

// RecordAcknowledged keeps the commit time up to which Kafka acknowledged
// every record (never moving it back).
func RecordAcknowledged(ctx context.Context, q Querier, slot string, commit time.Time) error {
	_, err := q.Exec(ctx, `UPDATE outboxd_slots SET acknowledged_commit_time = $2
		WHERE slot_name = $1 AND (acknowledged_commit_time IS NULL OR acknowledged_commit_time < $2)`, slot, commit)
	return catalogWriteError("recording the newest acknowledged commit of slot "+slot, err)
}

// RecordPaused records in outboxd_slots that slot is paused (since now,
// unless recorded already), or that it is not any more.
func RecordPaused(ctx context.Context, q Querier, slot string, paused bool) error {
	sql := `UPDATE outboxd_slots SET paused_at = now() WHERE slot_name = $1 AND paused_at IS NULL`
	if !paused {
		sql = `UPDATE outboxd_slots SET paused_at = NULL WHERE slot_name = $1 AND paused_at IS NOT NULL`
	}
	_, err := q.Exec(ctx, sql, slot)
	return catalogWriteError("recording whether slot "+slot+" is paused", err)
}

// ReadPausedAt reads since when slot is paused, as outboxd_slots records
// it: nil when it is not, or the catalog has no record of pauses (no
// outboxd_slots, one older than migration 0014, or a role that may not
// read it).
func ReadPausedAt(ctx context.Context, q Querier, slot string) (*time.Time, error) {
	var at *time.Time
	err := q.QueryRow(ctx, `SELECT paused_at FROM outboxd_slots WHERE slot_name = $1`, slot).Scan(&at)
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42703" || pe.Code == "42501"): // no table, no column, no privilege
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading whether slot %s is paused: %w", slot, err)
	}
	return at, nil
}

// Querier is what the catalog functions need of a connection or transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func catalogWriteError(doing string, err error) error {
	switch {
	case err == nil:
		return nil
	case isUndefinedTable(err):
		return fmt.Errorf("%s: %w", doing, ErrNoCatalog)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

func isPermissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// maxNameLen is PostgreSQL's longest name (NAMEDATALEN - 1).
const maxNameLen = 63

// ValidName checks a replication slot name as PostgreSQL does
// (ReplicationSlotValidateName): 1 to 63 lower-case letters, digits and
// underscores.
func ValidName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > maxNameLen:
		return fmt.Errorf("%q is %d bytes: a slot name has at most %d", name, len(name), maxNameLen)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("%q: slot names use lower-case letters, digits and underscores only", name)
		}
	}
	return nil
}

// CatalogSlots are the slots outboxd's catalog records in one database
// that exist on its server, and the WAL each retains.
type CatalogSlots struct {
	// Database names the database: "<system identifier>/<name>", the same
	// for every URL that reaches it.
	Database string
	Retained map[string]int64 // by slot name; -1 when the slot has no restart position
}

// ReadCatalogSlots reads the slots of the database conn is on that
// outboxd's catalog records and the server has. A database without the
// catalog (never migrated) has none.
func ReadCatalogSlots(ctx context.Context, conn *pgx.Conn) (CatalogSlots, error) {
	var out CatalogSlots
	if err := conn.QueryRow(ctx, `SELECT system_identifier::text || '/' || current_database() FROM pg_catalog.pg_control_system()`).Scan(&out.Database); err != nil {
		return out, fmt.Errorf("identifying the database: %w", err)
	}
	out.Retained = map[string]int64{}
	rows, err := conn.Query(ctx, `SELECT c.slot_name,
		coalesce((CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_lsn() END
			- s.restart_lsn)::bigint, -1)
		FROM outboxd_slots c JOIN pg_catalog.pg_replication_slots s ON s.slot_name = c.slot_name
		WHERE s.database = current_database()`)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table: no catalog here
			return out, nil
		}
		return out, fmt.Errorf("reading outboxd_slots: %w", err)
	}
	for rows.Next() {
		var name string
		var retained int64
		if err := rows.Scan(&name, &retained); err != nil {
			return out, fmt.Errorf("reading outboxd_slots: %w", err)
		}
		out.Retained[name] = retained
	}
	if err := rows.Err(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" {
			return out, nil
		}
		return out, fmt.Errorf("reading outboxd_slots: %w", err)
	}
	return out, nil
}
