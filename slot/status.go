package slot

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
)

// Status is what an operator needs to know about the slot and the
// publication (outboxd status, the WAL monitor, run's checks). Its JSON
// form is `outboxd status --json`.
type Status struct {
	Slot              string     `json:"slot"`
	Exists            bool       `json:"exists"`
	Plugin            string     `json:"plugin,omitempty"`
	Database          string     `json:"database,omitempty"`
	Active            bool       `json:"active"`
	ActivePID         int        `json:"active_pid,omitempty"`
	ConfirmedFlushLSN outbox.LSN `json:"-"`
	RestartLSN        outbox.LSN `json:"-"`
	CurrentLSN        outbox.LSN `json:"-"`
	Confirmed         string     `json:"confirmed_flush_lsn,omitempty"`
	Current           string     `json:"current_wal_lsn"`
	LagBytes          int64      `json:"lag_bytes"`          // current WAL minus confirmed: not yet published and confirmed
	RetainedWALBytes  int64      `json:"retained_wal_bytes"` // current WAL minus restart_lsn: kept on disk for the slot
	WALStatus         string     `json:"wal_status,omitempty"`
	SafeWALSize       *int64     `json:"safe_wal_size,omitempty"` // bytes until invalidation under max_slot_wal_keep_size; absent when unlimited
	Publication       string     `json:"publication"`
	PublicationExists bool       `json:"publication_exists"`
	Tables            []string   `json:"tables"`
}

// Lost reports whether PostgreSQL invalidated the slot.
func (s Status) Lost() bool { return s.WALStatus == "lost" }

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
	return st, nil
}

// Read reads the slot's row of pg_replication_slots and the current WAL
// position; Exists is false when there is no such slot.
func Read(ctx context.Context, conn *pgx.Conn, slot string) (Status, error) {
	st := Status{Slot: slot, Tables: []string{}}
	var current string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_current_wal_lsn()::text`).Scan(&current); err != nil {
		return st, fmt.Errorf("reading the current WAL position: %w", err)
	}
	st.Current = current
	st.CurrentLSN, _ = outbox.ParseLSN(current)

	var plugin, database, walStatus, confirmed, restart *string
	var pid *int32
	err := conn.QueryRow(ctx, `SELECT plugin, database, active_pid, confirmed_flush_lsn::text, restart_lsn::text, wal_status, safe_wal_size
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&plugin, &database, &pid, &confirmed, &restart, &walStatus, &st.SafeWALSize)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return st, nil
	case err != nil:
		return st, fmt.Errorf("reading replication slot %s: %w", slot, err)
	}
	st.Exists = true
	st.Plugin, st.Database, st.WALStatus = deref(plugin), deref(database), deref(walStatus)
	if pid != nil {
		st.Active, st.ActivePID = true, int(*pid)
	}
	if confirmed != nil {
		st.Confirmed = *confirmed
		if st.ConfirmedFlushLSN, err = outbox.ParseLSN(*confirmed); err != nil {
			return st, fmt.Errorf("reading replication slot %s: confirmed_flush_lsn: %w", slot, err)
		}
		st.LagBytes = max(0, int64(st.CurrentLSN)-int64(st.ConfirmedFlushLSN))
	}
	if restart != nil {
		st.RestartLSN, _ = outbox.ParseLSN(*restart)
		st.RetainedWALBytes = max(0, int64(st.CurrentLSN)-int64(st.RestartLSN))
	}
	return st, nil
}

// publicationExists is the one query for whether a publication exists.
func publicationExists(ctx context.Context, conn *pgx.Conn, publication string) (bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1)`, publication).Scan(&exists); err != nil {
		return false, fmt.Errorf("reading publication %s: %w", publication, err)
	}
	return exists, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
