package slot

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// HeartbeatConfig configures a Heartbeat.
type HeartbeatConfig struct {
	DatabaseURL string // required
	// PrimaryURL is where the heartbeat is written while DatabaseURL
	// reaches a standby (decoding on a standby): a standby cannot write
	// WAL, and the primary's message reaches the standby's slot through
	// replication. Default "": DatabaseURL's server.
	PrimaryURL string
	Interval   time.Duration // required: there is no default, the heartbeat is opt-in
	// Active, when set, says whether this process streams the slot now: a
	// heartbeat is written only then. Every replica of a pipeline runs its
	// Heartbeat; only the one holding the slot needs to, and the others'
	// would each add WAL (and a keepalive to every slot of the server).
	Active func() bool
}

// Heartbeat writes a small non-transactional logical message every
// Interval (pg_logical_emit_message). It is opt-in: outboxd confirms the
// server's WAL end from keepalives while idle, which is enough unless the
// walsender never gets to send them (for example a database whose WAL comes
// only from other databases' traffic on some managed services). The message
// itself is never published (pgoutput does not send messages unless asked).
type Heartbeat struct {
	cfg     HeartbeatConfig
	log     *slog.Logger
	written atomic.Uint64
}

// NewHeartbeat checks cfg.
func NewHeartbeat(cfg HeartbeatConfig, log *slog.Logger) (*Heartbeat, error) {
	if cfg.DatabaseURL == "" || cfg.Interval <= 0 {
		return nil, errors.New("heartbeat: database URL and a positive interval are required")
	}
	return &Heartbeat{cfg: cfg, log: log}, nil
}

// Written returns how many heartbeats were written.
func (h *Heartbeat) Written() uint64 { return h.written.Load() }

// Run writes heartbeats until ctx ends. Failures are logged and retried at
// the next interval; Run returns nil.
func (h *Heartbeat) Run(ctx context.Context) error {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if h.cfg.Active != nil && !h.cfg.Active() {
			if conn != nil { // a standby holds no connection for it
				conn.Close(context.WithoutCancel(ctx))
				conn = nil
			}
			continue
		}
		if conn == nil || conn.IsClosed() {
			c, err := h.connect(ctx)
			if err != nil {
				h.log.Debug("heartbeat skipped: cannot connect", "err", err)
				continue
			}
			conn = c
		}
		if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_logical_emit_message(false, 'outboxd.heartbeat', '')`); err != nil {
			if ctx.Err() == nil {
				h.log.Warn("heartbeat failed; retrying at the next interval", "err", err)
			}
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
			continue
		}
		h.written.Add(1)
		h.log.Debug("heartbeat written")
	}
}

// connect opens the connection heartbeats are written on: DatabaseURL's
// server, or the primary (PrimaryURL) while that one is a standby. It is
// asked again at every reconnect, so that a promoted standby gets them.
func (h *Heartbeat) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, h.cfg.DatabaseURL)
	if err != nil || h.cfg.PrimaryURL == "" {
		return conn, err
	}
	in, err := inRecoveryNow(ctx, conn)
	if err == nil && !in {
		return conn, nil
	}
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	return pgx.Connect(ctx, h.cfg.PrimaryURL)
}
