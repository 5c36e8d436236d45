package slot

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/outbox"
)

// Status is what an operator needs to know about the slot and the
// publication (outboxd status, the WAL monitor, run's checks). Its JSON
// form is `outboxd status --json`.
type Status struct {
	Slot     string `json:"slot"`
	Exists   bool   `json:"exists"`
	Plugin   string `json:"plugin,omitempty"`
	Database string `json:"database,omitempty"`
	// CurrentDatabase is the database of the connection. Slot names are
	// per server: OtherDatabase says the slot exists but belongs to
	// another database of the server (Database), and cannot be used from
	// this one (OtherDatabaseError).
	CurrentDatabase string `json:"current_database"`
	OtherDatabase   bool   `json:"other_database,omitempty"`
	Active          bool   `json:"active"`
	ActivePID       int    `json:"active_pid,omitempty"`
	// ActiveApplication is the application_name of the process holding
	// the slot (outboxd's: slot.AppName), where this role may see it.
	ActiveApplication string `json:"active_application_name,omitempty"`
	// PausedAt (ReadStatus) is since when an outboxd pipeline paused the
	// slot, no one having streamed it since, as outboxd_slots records it;
	// nil otherwise.
	PausedAt          *time.Time `json:"paused_at,omitempty"`
	ConfirmedFlushLSN outbox.LSN `json:"-"`
	RestartLSN        outbox.LSN `json:"-"`
	CurrentLSN        outbox.LSN `json:"-"`
	Confirmed         string     `json:"confirmed_flush_lsn,omitempty"`
	Current           string     `json:"current_wal_lsn"`
	LagBytes          int64      `json:"lag_bytes"`          // current WAL minus confirmed: not yet published and confirmed
	RetainedWALBytes  int64      `json:"retained_wal_bytes"` // current WAL minus restart_lsn: kept on disk for the slot
	WALStatus         string     `json:"wal_status,omitempty"`
	SafeWALSize       *int64     `json:"safe_wal_size,omitempty"` // bytes until invalidation under max_slot_wal_keep_size; absent when unlimited
	// Columns of newer servers, absent (nil, "") where the server has none:
	// conflicting (16+: invalidated by a conflict with recovery or
	// wal_level), invalidation_reason, failover and synced (17+).
	Conflicting        *bool  `json:"conflicting,omitempty"`
	InvalidationReason string `json:"invalidation_reason,omitempty"`
	Failover           *bool  `json:"failover,omitempty"`
	Synced             *bool  `json:"synced,omitempty"`
	// ServerVersion is server_version_num (150000 for 15.0).
	ServerVersion int `json:"server_version_num"`
	// InRecovery: the server is a standby; Current is then its replay
	// position (pg_last_wal_replay_lsn).
	InRecovery        bool     `json:"in_recovery"`
	Publication       string   `json:"publication"`
	PublicationExists bool     `json:"publication_exists"`
	Tables            []string `json:"tables"`
}

// Lost reports whether PostgreSQL invalidated the slot: wal_status lost
// (WAL removed), or, on 16+, conflicting or an invalidation_reason
// (rows_removed, wal_level_insufficient, 18's idle_timeout).
func (s Status) Lost() bool {
	return s.WALStatus == "lost" || s.InvalidationReason != "" || (s.Conflicting != nil && *s.Conflicting)
}

// Why says how the slot was invalidated, for errors and status.
func (s Status) Why() string {
	if s.InvalidationReason != "" {
		return "invalidation_reason " + s.InvalidationReason
	}
	if s.Conflicting != nil && *s.Conflicting {
		return "conflicting"
	}
	return "wal_status " + s.WALStatus
}

// ReadStatus reads the slot's and the publication's state.
func ReadStatus(ctx context.Context, conn *pgx.Conn, slot, publication string) (Status, error) {
	st, err := Read(ctx, conn, slot)
	if err != nil {
		return st, err
	}
	st.Publication = publication
	if st.PublicationExists, err = publicationExists(ctx, conn, publication); err != nil {
		return st, err
	}
	rows, err := conn.Query(ctx, `SELECT schemaname || '.' || tablename FROM pg_catalog.pg_publication_tables WHERE pubname = $1 ORDER BY 1`, publication)
	if err != nil {
		return st, fmt.Errorf("reading the tables of publication %s: %w", publication, err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return st, fmt.Errorf("reading the tables of publication %s: %w", publication, err)
	}
	st.Tables = append(st.Tables, tables...)
	if st.Exists && !st.Active {
		if st.PausedAt, err = ReadPausedAt(ctx, conn, slot); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Read reads the slot's row of pg_replication_slots and the current WAL
// position; Exists is false when there is no such slot.
func Read(ctx context.Context, conn *pgx.Conn, slot string) (Status, error) {
	st := Status{Slot: slot, Tables: []string{}}
	var current string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery(), CASE WHEN pg_catalog.pg_is_in_recovery()
			THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_lsn() END::text`).Scan(&st.InRecovery, &current); err != nil {
		return st, fmt.Errorf("reading the current WAL position: %w", err)
	}
	st.Current = current
	st.CurrentLSN, _ = outbox.ParseLSN(current)

	// The row as JSON: its columns differ by version (16 added
	// conflicting, 17 invalidation_reason, failover and synced), and a
	// column a version lacks is simply absent.
	var row *slotRow
	var holder *string
	err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int, pg_catalog.current_database(),
			(SELECT pg_catalog.to_jsonb(s) FROM pg_catalog.pg_replication_slots s WHERE slot_name = $1),
			(SELECT a.application_name FROM pg_catalog.pg_replication_slots s JOIN pg_catalog.pg_stat_activity a ON a.pid = s.active_pid
				WHERE s.slot_name = $1)`, slot).
		Scan(&st.ServerVersion, &st.CurrentDatabase, &row, &holder)
	switch {
	case err != nil:
		return st, fmt.Errorf("reading replication slot %s: %w", slot, err)
	case row == nil:
		return st, nil
	}
	st.Exists = true
	st.Plugin, st.Database, st.WALStatus = deref(row.Plugin), deref(row.Database), deref(row.WALStatus)
	st.SafeWALSize, st.Conflicting, st.Failover, st.Synced = row.SafeWALSize, row.Conflicting, row.Failover, row.Synced
	st.InvalidationReason = deref(row.InvalidationReason)
	st.OtherDatabase = st.Database != "" && st.Database != st.CurrentDatabase // "": a physical slot (no database)
	if row.ActivePID != nil {
		st.Active, st.ActivePID, st.ActiveApplication = true, *row.ActivePID, deref(holder)
	}
	if row.ConfirmedFlushLSN != nil {
		st.Confirmed = *row.ConfirmedFlushLSN
		if st.ConfirmedFlushLSN, err = outbox.ParseLSN(st.Confirmed); err != nil {
			return st, fmt.Errorf("reading replication slot %s: confirmed_flush_lsn: %w", slot, err)
		}
		st.LagBytes = max(0, int64(st.CurrentLSN)-int64(st.ConfirmedFlushLSN))
	}
	if row.RestartLSN != nil {
		st.RestartLSN, _ = outbox.ParseLSN(*row.RestartLSN)
		st.RetainedWALBytes = max(0, int64(st.CurrentLSN)-int64(st.RestartLSN))
	}
	return st, nil
}

// slotRow is the part of a pg_replication_slots row outboxd reads.
type slotRow struct {
	SlotName           string  `json:"slot_name"`
	Plugin             *string `json:"plugin"`
	Database           *string `json:"database"`
	ActivePID          *int    `json:"active_pid"`
	ConfirmedFlushLSN  *string `json:"confirmed_flush_lsn"`
	RestartLSN         *string `json:"restart_lsn"`
	WALStatus          *string `json:"wal_status"`
	SafeWALSize        *int64  `json:"safe_wal_size"`
	Conflicting        *bool   `json:"conflicting"`
	InvalidationReason *string `json:"invalidation_reason"`
	Failover           *bool   `json:"failover"`
	Synced             *bool   `json:"synced"`
}

// publicationExists is the one query for whether a publication exists.
func publicationExists(ctx context.Context, conn *pgx.Conn, publication string) (bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1)`, publication).Scan(&exists); err != nil {
		return false, fmt.Errorf("reading publication %s: %w", publication, err)
	}
	return exists, nil
}

// Coverage is what the catalog says of an outbox table and a publication.
type Coverage struct {
	// Exists says the table exists; Table is then its name as PostgreSQL
	// writes it (schema-qualified, quoted where needed), Publication the
	// publication's.
	Exists      bool
	Table       string
	Publication string
	// Published says the publication publishes the table's rows: it lists
	// the table (FOR TABLE, FOR TABLES IN SCHEMA, FOR ALL TABLES), or, for
	// a partitioned table in a publication without
	// publish_via_partition_root, every one of its partitions.
	Published bool
}

// ReadCoverage is the one query for whether publication publishes table
// (SQL syntax, as --table: app.outbox, or "App"."Outbox"; an unqualified
// name is looked up on the search_path). A publication that does not
// exist publishes nothing.
func ReadCoverage(ctx context.Context, q Querier, publication, table string) (Coverage, error) {
	name, err := sqlquote.ParseQualified(table)
	if err != nil {
		return Coverage{}, fmt.Errorf("checking publication %s covers %s: %w", publication, table, err)
	}
	var c Coverage
	err = q.QueryRow(ctx, `WITH t AS (
			SELECT c.oid, c.relkind, pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname) AS name
			FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = pg_catalog.to_regclass($2)),
		published AS (
			SELECT c.oid FROM pg_catalog.pg_publication_tables pt
			JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
			JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
			WHERE pt.pubname = $1),
		leaves AS (
			SELECT p.relid FROM t, pg_catalog.pg_partition_tree(t.oid) p WHERE t.relkind = 'p' AND p.isleaf)
		SELECT EXISTS (SELECT FROM t), coalesce((SELECT name FROM t), ''), pg_catalog.quote_ident($1),
			EXISTS (SELECT FROM t WHERE t.oid IN (SELECT oid FROM published))
				OR (EXISTS (SELECT FROM leaves) AND NOT EXISTS (SELECT FROM leaves WHERE relid NOT IN (SELECT oid FROM published)))`,
		publication, name.Sanitize()).Scan(&c.Exists, &c.Table, &c.Publication, &c.Published)
	if err != nil {
		return Coverage{}, fmt.Errorf("checking publication %s covers %s: %w", publication, table, err)
	}
	return c, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
