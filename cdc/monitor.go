package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// WALMonitor watches the WAL the slot retains on the server: it warns when
// it passes a threshold and stops (a permanent error) when PostgreSQL
// invalidated the slot, because events may then be missing and only an
// operator can decide how to reconcile. It never recreates a slot.
type WALMonitor struct {
	DatabaseURL string
	Slot        string
	Publication string
	// Interval between checks. Default 30s.
	Interval time.Duration
	// WarnBytes is the retained WAL that triggers a warning. Default 1 GiB.
	WarnBytes int64
	Log       *slog.Logger

	retained atomic.Int64
	warned   bool
}

// Retained returns the retained WAL in bytes at the last check (-1 before).
func (m *WALMonitor) Retained() int64 { return m.retained.Load() - 1 }

// Run checks until ctx ends (nil) or the slot is invalidated (permanent error).
func (m *WALMonitor) Run(ctx context.Context) error {
	if m.Interval <= 0 {
		m.Interval = 30 * time.Second
	}
	if m.WarnBytes <= 0 {
		m.WarnBytes = 1 << 30
	}
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	for {
		if err := m.check(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *WALMonitor) check(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, m.Interval)
	defer cancel()
	conn, err := pgx.Connect(cctx, m.DatabaseURL)
	if err != nil {
		m.Log.Debug("WAL check skipped: cannot connect", "slot", m.Slot, "err", err)
		return nil // the streamer reports connection trouble
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, err := ReadStatus(cctx, conn, m.Slot, m.Publication)
	if err != nil {
		m.Log.Debug("WAL check skipped", "slot", m.Slot, "err", err)
		return nil
	}
	if st.Lost() {
		return permanent(fmt.Errorf("replication slot %s was invalidated (wal_status lost): PostgreSQL removed WAL it still needed (max_slot_wal_keep_size), so outbox rows may be missing from Kafka; reconcile from the outbox table, then drop and recreate the slot deliberately", m.Slot))
	}
	m.retained.Store(st.RetainedWALBytes + 1)
	switch {
	case st.RetainedWALBytes >= m.WarnBytes && !m.warned:
		m.warned = true
		args := []any{"slot", m.Slot, "retained_wal_bytes", st.RetainedWALBytes, "threshold_bytes", m.WarnBytes, "wal_status", st.WALStatus, "active", st.Active}
		if st.SafeWALSize != nil {
			args = append(args, "safe_wal_size", *st.SafeWALSize)
		}
		m.Log.Warn("replication slot retains a lot of WAL: is publishing stuck or far behind?", args...)
	case st.RetainedWALBytes < m.WarnBytes/2 && m.warned:
		m.warned = false
		m.Log.Info("replication slot WAL retention back to normal", "slot", m.Slot, "retained_wal_bytes", st.RetainedWALBytes)
	}
	return nil
}

// Heartbeat writes a small non-transactional logical message every
// interval (pg_logical_emit_message). It is opt-in: outboxd confirms the
// server's WAL end from keepalives while idle, which is enough unless the
// walsender never gets to send them (for example a database whose WAL comes
// only from other databases' traffic on some managed services). The message
// itself is never published (pgoutput does not send messages unless asked).
func Heartbeat(ctx context.Context, url string, interval time.Duration, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if conn == nil || conn.IsClosed() {
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				log.Debug("heartbeat skipped: cannot connect", "err", err)
				continue
			}
			conn = c
		}
		if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(false, 'outboxd.heartbeat', '')`); err != nil && ctx.Err() == nil {
			log.Warn("heartbeat failed; retrying at the next interval", "err", err)
			conn.Close(context.Background())
			conn = nil
		}
	}
}
