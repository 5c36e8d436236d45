package slot

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
)

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	DatabaseURL string // required
	// PrimaryURL is where outboxd_slots is written while DatabaseURL
	// reaches a standby (decoding on a standby). Default "": DatabaseURL.
	PrimaryURL  string
	Slot        string // required
	Publication string // required
	// Interval between checks. Default DefaultMonitorInterval.
	Interval time.Duration
	// WarnBytes is the retained WAL that triggers a warning. Default
	// DefaultWarnBytes.
	WarnBytes int64
	// AcknowledgedCommit, when set, returns the commit time up to which
	// Kafka acknowledged every record (that of the newest transaction the
	// confirmable position passed); each check records it in
	// outboxd_slots, where a lost slot's recovery command takes its
	// suggested predicate from. Nil: nothing is recorded.
	AcknowledgedCommit func() time.Time
	// Paused: the pipeline is paused (it does not stream the slot); each
	// check records it in outboxd_slots while no one streams the slot,
	// for outboxd status. A check of a pipeline that is not paused clears
	// the record once it finds the slot streamed.
	Paused bool
	// Names renders the settings its messages name, as ProvisionConfig's.
	Names field.Names
}

// Defaults of MonitorConfig.
const (
	DefaultMonitorInterval = 30 * time.Second
	DefaultWarnBytes       = 1 << 30
)

// Monitor watches the WAL the slot retains on the server: it warns when it
// passes a threshold and stops (ErrInvalidated) when PostgreSQL invalidated
// the slot, because events may then be missing and only an operator can
// decide how to reconcile. It never recreates a slot.
type Monitor struct {
	cfg      MonitorConfig
	log      *slog.Logger
	retained atomic.Int64 // retained WAL bytes + 1; 0 before the first check
	warned   bool
	recorded time.Time // the acknowledged commit time last recorded
	// decoding is which server decodes the slot as the last check found
	// it: 0 not known yet, 1 a primary, 2 a standby.
	decoding atomic.Int32
	// confirmed and current are the slot's confirmed position and the
	// server's WAL position at the last check (0 before).
	confirmed, current atomic.Uint64
	// pauseRecorded: this Monitor recorded the pause, or its end, once
	// (recordPause writes at most once).
	pauseRecorded bool
}

// Which server decodes the slot (Monitor.Decoding).
const (
	DecodingUnknown = iota
	DecodingPrimary
	DecodingStandby
)

// Decoding says which server decodes the slot, as the last check found
// it: DecodingPrimary, DecodingStandby, or DecodingUnknown before the
// first check.
func (m *Monitor) Decoding() int { return int(m.decoding.Load()) }

// noteDecoding records which server decodes the slot and says when that
// changes: a session goes on across a promotion of the standby it
// decodes on (the walsender follows the new timeline), so the log says
// it here rather than at the next session.
func (m *Monitor) noteDecoding(st Status) {
	now := int32(DecodingPrimary)
	if st.InRecovery {
		now = DecodingStandby
	}
	prev := m.decoding.Swap(now)
	n := m.cfg.Names
	switch {
	case prev == now:
	case now == DecodingStandby:
		m.log.Info("decoding on a standby: the slot is read on the server of "+n.Of("DatabaseURL")+"; outboxd's catalog is written on the primary",
			"slot", m.cfg.Slot, "server_version", st.ServerVersion)
	case prev == DecodingStandby:
		m.log.Warn("the standby that decodes the slot is a primary now (it was promoted): the slot carries on there, and outboxd's catalog and heartbeats are written there too",
			"slot", m.cfg.Slot)
	case m.cfg.PrimaryURL != "":
		m.log.Info("the server of "+n.Of("DatabaseURL")+" is a primary, not a standby: decoding there, and "+n.Of("PrimaryURL")+" is not used while it is one",
			"slot", m.cfg.Slot)
	}
}

// Validate reports every problem of c at once, each a *field.Error naming
// the field; zero fields mean their defaults. NewMonitor refuses a
// MonitorConfig that does not validate.
func (c MonitorConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		field string
		bad   bool
		why   string
	}{
		{"DatabaseURL", c.DatabaseURL == "", "required"}, {"Slot", c.Slot == "", "required"}, {"Publication", c.Publication == "", "required"},
		{"Interval", c.Interval < 0, "must not be negative"}, {"WarnBytes", c.WarnBytes < 0, "must not be negative"},
	} {
		if f.bad {
			errs = append(errs, &field.Error{Field: f.field, Problem: f.why})
		}
	}
	return errors.Join(errs...)
}

// WithDefaults returns c with every zero field set to its default.
func (c MonitorConfig) WithDefaults() MonitorConfig {
	if c.Interval <= 0 {
		c.Interval = DefaultMonitorInterval
	}
	if c.WarnBytes <= 0 {
		c.WarnBytes = DefaultWarnBytes
	}
	return c
}

// NewMonitor fills cfg's zero fields with the defaults and checks it.
func NewMonitor(cfg MonitorConfig, log *slog.Logger) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Monitor{cfg: cfg.WithDefaults(), log: log}, nil
}

// Retained returns the retained WAL in bytes at the last check (-1 before).
func (m *Monitor) Retained() int64 { return m.retained.Load() - 1 }

// Positions returns the slot's confirmed position and the server's WAL
// position (a standby's replay position) at the last check; zero before.
// A pipeline that does not stream (paused) has no other source for them.
func (m *Monitor) Positions() (confirmed, current outbox.LSN) {
	return outbox.LSN(m.confirmed.Load()), outbox.LSN(m.current.Load())
}

// Run checks at once and then every Interval, until ctx ends (nil) or the
// slot is invalidated (an error wrapping ErrInvalidated).
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
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

func (m *Monitor) check(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.Interval)
	defer cancel()
	conn, err := pgx.Connect(cctx, m.cfg.DatabaseURL)
	if err != nil {
		m.log.Debug("WAL check skipped: cannot connect", "slot", m.cfg.Slot, "err", err)
		return nil // the streamer reports connection trouble
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, err := Read(cctx, conn, m.cfg.Slot)
	if err != nil {
		m.log.Debug("WAL check skipped", "slot", m.cfg.Slot, "err", err)
		return nil
	}
	if st.Lost() {
		return invalidatedError(st, m.cfg.Names)
	}
	m.noteDecoding(st)
	m.retained.Store(st.RetainedWALBytes + 1)
	m.confirmed.Store(uint64(st.ConfirmedFlushLSN))
	m.current.Store(uint64(st.CurrentLSN))
	m.recordAcknowledged(cctx, conn, st.InRecovery)
	m.recordPause(cctx, conn, st)
	switch {
	case st.RetainedWALBytes >= m.cfg.WarnBytes && !m.warned:
		m.warned = true
		args := []any{"slot", m.cfg.Slot, "retained_wal_bytes", st.RetainedWALBytes, "threshold_bytes", m.cfg.WarnBytes, "wal_status", st.WALStatus, "active", st.Active}
		if st.SafeWALSize != nil {
			args = append(args, "safe_wal_size", *st.SafeWALSize)
		}
		m.log.Warn("replication slot retains a lot of WAL: is publishing stuck or far behind?", args...)
	case st.RetainedWALBytes < m.cfg.WarnBytes/2 && m.warned:
		m.warned = false
		m.log.Info("replication slot WAL retention back to normal", "slot", m.cfg.Slot, "retained_wal_bytes", st.RetainedWALBytes)
	}
	return nil
}

// recordPause records a paused pipeline's pause in outboxd_slots while
// the slot is not streamed, or clears it once a pipeline that is not
// paused finds it streamed (by this process or another), once per
// Monitor. Failing is not worth stopping for (a role without UPDATE, a
// schema older than migration 0014): only status says less.
func (m *Monitor) recordPause(ctx context.Context, conn *pgx.Conn, st Status) {
	if m.pauseRecorded || m.cfg.Paused == st.Active { // paused and streamed by another, or not paused and not streamed (yet)
		return
	}
	catalog, closeCatalog, err := Catalog(ctx, conn, st.InRecovery, m.cfg.PrimaryURL, "")
	if err != nil {
		m.log.Debug("could not record whether the slot is paused", "slot", m.cfg.Slot, "err", err)
		return
	}
	defer closeCatalog()
	if err := RecordPaused(ctx, catalog, m.cfg.Slot, m.cfg.Paused); err != nil {
		m.log.Debug("could not record whether the slot is paused", "slot", m.cfg.Slot, "err", err)
		return
	}
	m.pauseRecorded = true
}

// recordAcknowledged keeps outboxd_slots' acknowledged commit time current.
// Failing is not worth stopping for (a role without UPDATE on the table,
// a schema older than migration 0005): only the recovery hint is staler.
func (m *Monitor) recordAcknowledged(ctx context.Context, conn *pgx.Conn, inRecovery bool) {
	if m.cfg.AcknowledgedCommit == nil {
		return
	}
	t := m.cfg.AcknowledgedCommit()
	if t.IsZero() || !t.After(m.recorded) {
		return
	}
	catalog, closeCatalog, err := Catalog(ctx, conn, inRecovery, m.cfg.PrimaryURL, "")
	if err != nil {
		m.log.Debug("could not record the newest acknowledged commit", "slot", m.cfg.Slot, "err", err)
		return
	}
	defer closeCatalog()
	if err := RecordAcknowledged(ctx, catalog, m.cfg.Slot, t); err != nil {
		m.log.Debug("could not record the newest acknowledged commit", "slot", m.cfg.Slot, "err", err)
		return
	}
	m.recorded = t
}
