package cdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// Streamer streams the publication's inserts to the first stage of its
// pipeline, one replication session after another, and confirms what its
// Window acknowledged. Run it once.
type Streamer struct {
	cfg Config
	// out takes the changes the stream reads: the pump, or a stage that
	// hands them on to it (package registry's).
	out outbox.Stage
	// win is what became of them: the pump's window.
	win Window
	log *slog.Logger

	// confirmed is the newest position this process knows to be
	// confirmable, carried across sessions so that a new session starts
	// where the last one ended, even when the last status never reached the
	// server (the connection broke).
	confirmed outbox.LSN
	// warnedTimeout: checkServerTimeout warned already.
	warnedTimeout bool
	// authenticated: PostgreSQL let this process in on a session's
	// replication connection (and so on the regular ones before it).
	// Until then an authentication failure stops Run; after, it is
	// retried (see Run).
	authenticated bool
	counters      counters
	// ident is the server the records handed to the pump come from, as the
	// replication connection that reads them (or created the slot for a
	// backfill) identified it: confirmed is trusted only on the same one
	// (checkServer), and the exactly-once sink keys its progress with it
	// (Server).
	ident identity
	// prov sets the slot up (setUpSlot) and checks it for each session.
	prov *slot.Provisioner
	// standby: the last session found the slot in use by another process.
	// delayed: since then, a session found it released and the loop waited
	// TakeoverDelay before taking it.
	standby, delayed bool
	// takeNow ends a standby's wait, without the takeover delay (TakeNow).
	takeNow chan struct{}
	// warnedHolder is the slot holder's application_name this standby
	// warned runs other settings ("": none since it last streamed).
	warnedHolder string
}

// TakeNow makes a standby try the slot at once, without its takeover
// delay: the process that held it let it go gracefully for this one
// (package fleet's hand-over). Safe from any goroutine; a streamer that
// is not waiting takes it at its next wait.
func (s *Streamer) TakeNow() {
	select {
	case s.takeNow <- struct{}{}:
	default:
	}
}

// errTakeoverDelay is a session's answer when, standing by, it found the
// slot released and the TakeoverDelay is still to be waited.
var errTakeoverDelay = errors.New("the slot was released; waiting the takeover delay before taking it")

// identity is a server identity set by the streamer's goroutine and read
// by others.
type identity struct {
	mu     sync.Mutex
	id     slot.ServerID
	walEnd outbox.LSN    // the server's WAL end when it was identified
	known  chan struct{} // closed once id is set
}

func (i *identity) set(id slot.ServerID, walEnd outbox.LSN) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.known == nil {
		i.known = make(chan struct{})
	}
	if i.id == (slot.ServerID{}) {
		close(i.known)
	}
	i.id, i.walEnd = id, walEnd
}

// get returns the identity set last (zero before the first).
func (i *identity) get() slot.ServerID {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.id
}

func (i *identity) wait(ctx context.Context) (slot.ServerID, outbox.LSN, error) {
	i.mu.Lock()
	if i.known == nil {
		i.known = make(chan struct{})
	}
	known := i.known
	i.mu.Unlock()
	select {
	case <-known:
	case <-ctx.Done():
		return slot.ServerID{}, 0, fmt.Errorf("waiting for the replication stream to identify the server: %w", ctx.Err())
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.id, i.walEnd, nil
}

// Server returns the system identifier and timeline of the server whose
// records the streamer hands to the pump, as identified on the
// replication connection that reads them (IDENTIFY_SYSTEM), or on the one
// that created the slot for a backfill, and its WAL end then; it waits
// until the first is known. A separate connection could reach another
// server than the stream (a failover in between) and name the wrong
// history: the exactly-once sink keys its progress with this, and refuses
// progress past the WAL end (a storage rollback).
func (s *Streamer) Server(ctx context.Context) (systemID string, timeline int32, walEnd outbox.LSN, err error) {
	id, walEnd, err := s.ident.wait(ctx)
	return id.SystemID, id.Timeline, walEnd, err
}

// columns returns the Columns the records are decoded with, for a session
// and for a backfill alike: cfg.Columns with Source set to cfg.Source, or
// else to the server the records come from, "<system identifier>/<database>"
// (ident: identified on the replication connection that reads them, or
// that created the slot for a backfill), so that every record carries its
// outboxd.source header (outbox.SourceHeader; the idempotency key is
// source + id). The system identifier stays the same across a failover to
// a physical standby; a cluster made anew (initdb, pg_upgrade) is a new
// source, unless cfg.Source names it.
func (s *Streamer) columns() layout.Columns {
	cols := s.cfg.Columns
	if s.cfg.Source != "" {
		cols.Source = s.cfg.Source
	} else if id := s.ident.get(); id.SystemID != "" && id.Database != "" {
		cols.Source = id.SystemID + "/" + layout.SourceName(id.Database)
	}
	return cols
}

// New returns a Streamer handing its changes to out, whose records win
// tracks (the pump, run beside the Streamer by its pipeline). cfg's zero
// fields take their defaults.
func New(cfg Config, out outbox.Stage, win Window, log *slog.Logger) (*Streamer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if out == nil || win == nil {
		return nil, errors.New("cdc: no stage to hand changes to, or no window")
	}
	s := &Streamer{cfg: cfg, out: out, win: win, log: log, takeNow: make(chan struct{}, 1)}
	prov, err := s.provisioner(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("cdc: %w", err)
	}
	s.prov = prov
	return s, nil
}

// Run streams until ctx ends (then finishes the open transaction, drains,
// confirms and returns nil) or a permanent error occurs (returned). Lost
// connections and a slot held by another process are retried. The
// window's own goroutine (the pump's Run) must run alongside for as long,
// and stop the stream (end ctx) when it fails.
//
// PostgreSQL refusing the credentials (a *slot.AuthError: a wrong password,
// no pg_hba.conf entry) is permanent until the process has been let in
// once, up to the first session's replication connection: at start the
// database URL is simply wrong and retrying cannot help. Once in, a
// refusal is retried with a Warn saying "authentication failed": the
// password was rotated or pg_hba.conf changed under a running process,
// which whoever did it can undo or complete (a process that stopped
// would have to be restarted by hand, and a standby would give up its
// place), and the retry warnings say what to fix.
func (s *Streamer) Run(ctx context.Context) error {
	defer s.counters.state.Store(int32(StateStopped))
	err := s.setUp(ctx)
	switch {
	case err == nil:
		return s.loop(ctx)
	case ctx.Err() != nil:
		s.log.Warn("stopped before the slot was set up; the next start does it again (an unfinished backfill runs again whole)", "slot", s.cfg.Slot, "err", err)
		return nil
	}
	return permanent(err) // the next start runs the setup again
}

// reconnectBackOff is the backoff between attempts to reach PostgreSQL:
// from 250 ms up to ReconnectMaxInterval, forever.
func (s *Streamer) reconnectBackOff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(250*time.Millisecond),
		backoff.WithMaxInterval(s.cfg.ReconnectMaxInterval),
		backoff.WithMaxElapsedTime(0),
	)
}

func (s *Streamer) loop(ctx context.Context) error {
	bo := s.reconnectBackOff()
	for {
		s.counters.state.Store(int32(StateStarting))
		streamed, err := s.session(ctx)
		if IsPermanent(err) || slot.Permanent(err) {
			return permanent(err)
		}
		if ctx.Err() != nil {
			s.log.Info("stopped", "slot", s.cfg.Slot, "confirmed_lsn", s.confirmed)
			return nil
		}
		var inUse *slot.InUseError
		var wait time.Duration
		switch {
		case errors.Is(err, slot.ErrBackfillUnderWay):
			// Set the slot up again: that waits on the lock while another
			// process backfills, and backfills anew when that process died
			// before finishing (nothing waits on a backfill forever).
			s.log.Info("another process is backfilling the slot, or died doing it; standing by", "slot", s.cfg.Slot)
			s.counters.state.Store(int32(StateStandby))
			if err := s.setUp(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return permanent(err)
			}
			continue
		case errors.Is(err, errTakeoverDelay):
			s.log.Info("replication slot released by the other process; waiting before taking it, so that a replica ranked before this one goes first",
				"slot", s.cfg.Slot, "takeover_delay", s.cfg.TakeoverDelay)
			s.delayed = true
			wait = s.cfg.TakeoverDelay
			s.counters.state.Store(int32(StateStandby))
		case errors.As(err, &inUse):
			if !s.standby {
				s.log.Info("replication slot is in use by another process; standing by to take over",
					"slot", s.cfg.Slot, "active_pid", inUse.PID, "holder", inUse.Holder, "retry_interval", s.cfg.SlotRetryInterval)
			}
			if !slot.SameSettings(s.cfg.ApplicationName, inUse.Holder) && inUse.Holder != s.warnedHolder {
				s.log.Warn("the process holding the replication slot runs other settings than this one: taking over, this one publishes with its own "+
					"(their startup logs say which differ; expected while a rollout changes them)",
					"slot", s.cfg.Slot, "active_pid", inUse.PID, "holder", inUse.Holder, "this_process", s.cfg.ApplicationName)
				s.warnedHolder = inUse.Holder
			}
			s.standby, s.delayed = true, false
			wait = s.cfg.SlotRetryInterval
			s.counters.state.Store(int32(StateStandby))
		default:
			var auth *slot.AuthError
			if errors.As(err, &auth) && !s.authenticated {
				return permanent(err) // the first connections: see Run
			}
			s.counters.reconnects.Add(1)
			s.counters.state.Store(int32(StateReconnecting))
			if streamed {
				bo.Reset()
			}
			wait = bo.NextBackOff()
			if auth != nil {
				s.log.Warn("authentication failed (was the password rotated, or pg_hba.conf changed?); reconnecting", "slot", s.cfg.Slot, "err", err, "retry_in", wait)
			} else {
				s.log.Warn("replication interrupted; reconnecting", "slot", s.cfg.Slot, "err", err, "retry_in", wait)
			}
		}
		if streamed {
			s.standby, s.delayed, s.warnedHolder = false, false, ""
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.log.Info("stopped", "slot", s.cfg.Slot, "confirmed_lsn", s.confirmed)
			return nil
		case <-t.C:
		case <-s.takeNow:
			t.Stop()
			if s.standby {
				s.delayed = true // its holder let it go for this one: no delay
			}
		}
	}
}

// setUp runs setUpSlot, retrying with backoff while PostgreSQL cannot be
// reached, or refuses the credentials after it once accepted them (see
// Run); any other failure is returned (a backfill that failed is run
// again by the next start, from a new slot).
func (s *Streamer) setUp(ctx context.Context) error {
	return backoff.RetryNotify(func() error {
		err := s.setUpSlot(ctx)
		var auth *slot.AuthError
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return backoff.Permanent(err)
		case errors.As(err, &auth):
			if !s.authenticated {
				return backoff.Permanent(err)
			}
			return err
		case unreachable(err), connectionLost(err):
			return err
		}
		return backoff.Permanent(err)
	}, backoff.WithContext(s.reconnectBackOff(), ctx), func(err error, wait time.Duration) {
		var auth *slot.AuthError
		if errors.As(err, &auth) {
			s.log.Warn("authentication failed (was the password rotated, or pg_hba.conf changed?); reconnecting to set the slot up", "slot", s.cfg.Slot, "err", err, "retry_in", wait)
			return
		}
		s.log.Warn("cannot reach PostgreSQL to set the slot up; reconnecting", "slot", s.cfg.Slot, "err", err, "retry_in", wait)
	})
}

// unreachable reports whether err is a failure to connect (the server down
// or restarting), as opposed to an answer.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.Timeout(err)
}

// connectionLost reports whether err is the connection going away in the
// middle of setting up (the server shut down, crashed or restarted) rather
// than an answer: the set-up runs under an advisory lock that goes with
// the connection, and each of its steps can be taken again.
func connectionLost(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		}
		return strings.HasPrefix(pe.Code, "08") // connection_exception
	}
	var op *net.OpError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, &op) || pgconn.SafeToRetry(err)
}

// session runs one replication connection from start to end. streamed
// reports whether replication started (for backoff and logging).
func (s *Streamer) session(ctx context.Context) (streamed bool, err error) {
	// Setting up is bounded: over a half-open connection a connect or a
	// query would otherwise wait for ever.
	setup, cancelSetup := context.WithTimeoutCause(ctx, s.cfg.ServerTimeout, errSetupTimeout)
	defer cancelSetup()
	info, err := prepare(setup, s.cfg, s.prov, s.log)
	if err != nil {
		return false, s.setupError(setup, err)
	}
	// A standby learns from the regular connection that the slot is still
	// held, without opening a replication connection for START_REPLICATION
	// to refuse.
	if info.Active {
		return false, &slot.InUseError{Slot: s.cfg.Slot, PID: info.ActivePID, Holder: info.ActiveApplication, Err: errSlotActive}
	}
	if s.standby && !s.delayed && s.cfg.TakeoverDelay > 0 {
		return false, errTakeoverDelay
	}
	act := &activity{}
	conn, err := s.connectReplication(setup, act)
	if err != nil {
		return false, s.setupError(setup, err)
	}
	s.authenticated = true
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx) // the session's outcome is already decided
	}()
	if err := s.checkServer(setup, conn, info); err != nil {
		return false, s.setupError(setup, err)
	}
	if err := s.checkServerTimeout(setup, conn); err != nil {
		return false, s.setupError(setup, err)
	}
	start := max(s.confirmed, info.ConfirmedFlushLSN)
	s.win.Start(start)
	if err := startReplication(setup, conn, s.cfg.Slot, s.cfg.Publication, start, s.cfg.Columns.MessagePrefix != ""); err != nil {
		err = slot.ClassifyStart(s.cfg.Slot, s.setupError(setup, err))
		var inUse *slot.InUseError
		if errors.As(err, &inUse) {
			inUse.PID, inUse.Holder = slotHolder(setup, s.cfg)
		}
		return false, err
	}
	cancelSetup()
	s.log.Info("streaming", "slot", s.cfg.Slot, "publication", s.cfg.Publication, "lsn", start)
	s.counters.state.Store(int32(StateStreaming))
	s.counters.confirmed.Store(uint64(start))

	r := &reader{conn: conn, dec: decode.NewDecoder(s.cfg.Columns.MessagePrefix), lay: layout.New(s.columns()), out: s.out, wm: s.win, slot: s.cfg.Slot,
		statusInterval: s.cfg.StatusInterval, idleWait: s.cfg.IdleWait, readLinger: s.cfg.ReadLinger, sharedLinger: s.cfg.SharedLinger, serverTimeout: s.cfg.ServerTimeout, names: s.cfg.Names, act: act, log: s.log, serverWALEnd: &s.counters.serverWALEnd,
		confirmedLSN: &s.counters.confirmed, confirmed: start}
	// A graceful stop (ctx) finishes the open transaction and drains; past
	// ShutdownTimeout the reader and the drain give up (hard).
	hard, cancelHard := afterGrace(ctx, s.cfg.ShutdownTimeout)
	defer cancelHard()
	err = r.run(hard, ctx)
	if werr := s.drain(ctx, hard); werr != nil && !IsPermanent(err) {
		err = werr
	}
	// The final status: the watermark after the drain, then a clean end
	// of the stream. When the connection is gone, the watermark is still
	// good: the next session starts from it, so only the transaction that
	// was open is sent again.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if ferr := r.finish(fctx); ferr != nil && err == nil && ctx.Err() != nil {
		s.log.Warn("could not end the replication stream cleanly; the last confirmation may be lost and its records re-sent", "slot", s.cfg.Slot, "err", ferr)
	}
	s.confirmed = max(s.confirmed, r.confirmed, s.win.Flushed())
	return true, err
}

// withdrawTimeout bounds the wait of a Withdraw for the answers to the
// requests already sent: a broker that answers does so well within it;
// past it the sink closes its Kafka client (see publish.Producer.Withdraw),
// so that what it sent is never sent again while another replica may
// hold the slot.
const withdrawTimeout = 10 * time.Second

// drain waits for the records of a session that ends, before its slot is
// given up: until Kafka acknowledged them, or, on a graceful stop (ctx
// ended), at most until hard ends (ShutdownTimeout later), or, when the
// session ended on its own (a lost connection: another replica may take
// the slot once the server notices), at most SlotRetryInterval. What is
// still unacknowledged then is withdrawn from the sink (Window.Withdraw),
// so that nothing of this session can be written after another holder's
// records: the next session, here or elsewhere, sends it again. An error
// means the withdrawal did not finish: the pipeline must stop, which
// closes its Kafka client.
//
// A sink that needs no withdrawal (exactly-once: the next holder of its
// transactional id fences it) is waited for as long as hard lasts.
func (s *Streamer) drain(ctx, hard context.Context) error {
	wait := hard
	if ctx.Err() == nil && s.win.Withdraws() {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(hard, s.cfg.SlotRetryInterval)
		defer cancel()
	}
	derr := s.win.Drain(wait)
	records, bytes := s.win.InFlight()
	switch {
	case derr == nil:
		return nil
	case !s.win.Withdraws():
		s.log.Warn("stopping with records unconfirmed; they are sent again on the next start",
			"slot", s.cfg.Slot, "records", records, "bytes", bytes, "confirmed_lsn", s.win.Flushed(), "cause", context.Cause(hard))
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	if err := s.win.Withdraw(wctx); err != nil {
		return permanent(fmt.Errorf("withdrawing %d records Kafka has not acknowledged before giving up slot %s: %w", records, s.cfg.Slot, err))
	}
	if ctx.Err() != nil {
		s.log.Warn("stopping with records Kafka has not acknowledged: withdrawn, never to be written by this process; they are sent again on the next start",
			"slot", s.cfg.Slot, "records", records, "bytes", bytes, "confirmed_lsn", s.win.Flushed(), "cause", context.Cause(hard))
	} else if records > 0 {
		s.log.Warn("the replication session ended with records Kafka has not acknowledged: withdrawn, never to be written by this session; the next one sends them again",
			"slot", s.cfg.Slot, "records", records, "bytes", bytes, "confirmed_lsn", s.win.Flushed())
	}
	return nil
}

// prepare runs the checks of one session on a regular connection and
// returns the slot's state: the publication, then the slot
// (Provisioner.Ready: a missing slot is refused as lost, one another
// process is backfilling is waited for as one in use).
func prepare(ctx context.Context, cfg Config, prov *slot.Provisioner, log *slog.Logger) (slot.Status, error) {
	conn, err := slot.Connect(ctx, cfg.DatabaseURL, cfg.ApplicationName)
	if err != nil {
		return slot.Status{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := checkPublication(ctx, conn, cfg, log); err != nil {
		return slot.Status{}, err
	}
	return prov.Ready(ctx, conn)
}

// checkPublication checks that the publication exists and that its tables
// have usable outbox columns (or tolerates them, for the dead-letter topic).
func checkPublication(ctx context.Context, conn *pgx.Conn, cfg Config, log *slog.Logger) error {
	tables, err := slot.CheckPublication(ctx, conn, cfg.Publication, cfg.Columns)
	switch {
	case errors.Is(err, slot.ErrTableUnusable) && cfg.TolerateUnusableTables:
		log.Warn("a table in the publication has no usable outbox columns: its rows go to the dead-letter topic", "err", err)
	case err != nil:
		return err
	case len(tables) == 0:
		log.Warn("publication covers no tables: nothing will be published", "publication", cfg.Publication)
	}
	if missing := cfg.Columns.Unpublished(tables); len(missing) > 0 {
		return permanent(fmt.Errorf("%s gives the columns of %s, which publication %s does not publish (it publishes %s): check the name, or add the table with outboxd migrate --extend-publication",
			cfg.Names.Of("Columns.Tables"), joinTables(missing), cfg.Publication, joinTables(tables)))
	}
	return nil
}

// joinTables writes tables as a list: "a.x, b.y", "none" when empty.
func joinTables(tables []layout.TableName) string {
	if len(tables) == 0 {
		return "none"
	}
	s := make([]string, len(tables))
	for i, t := range tables {
		s[i] = t.String()
	}
	return strings.Join(s, ", ")
}

// slotHolder reads who holds the slot, its pid and application_name (0
// when nobody does any more).
func slotHolder(ctx context.Context, cfg Config) (int, string) {
	conn, err := slot.Connect(ctx, cfg.DatabaseURL, cfg.ApplicationName)
	if err != nil {
		return 0, ""
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, err := slot.Read(ctx, conn, cfg.Slot)
	if err != nil {
		return 0, ""
	}
	return st.ActivePID, st.ActiveApplication
}

// afterGrace returns a context that ends d after parent ends (with cause
// errShutdownTimeout), or when the returned cancel is called.
func afterGrace(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	var timer atomic.Pointer[time.Timer]
	stop := context.AfterFunc(parent, func() {
		timer.Store(time.AfterFunc(d, func() { cancel(errShutdownTimeout) }))
	})
	return ctx, func() {
		stop()
		if t := timer.Load(); t != nil {
			t.Stop()
		}
		cancel(nil)
	}
}

var errShutdownTimeout = errors.New("shutdown timeout reached")

// errSlotActive is why a session did not start: the slot's row showed an
// active process.
var errSlotActive = errors.New("the slot is active")

var errSetupTimeout = errors.New("setting the replication session up took longer than the server timeout (the server or the network is not answering)")

// checkServerTimeout warns, once per process, when ServerTimeout is too
// short for the server's wal_sender_timeout: while the walsender replays a
// long transaction none of whose changes is published (another table's
// rows, updates), it reads standby statuses, and so answers them, only
// every wal_sender_timeout/2, so a live server can be that quiet.
//
// The check is advice, but its query is not: a server's refusal leaves the
// connection usable and is passed over, any other error (the set-up's
// deadline, a broken connection) means pgconn is closing the connection,
// and is returned so that the session does not go on using it.
func (s *Streamer) checkServerTimeout(ctx context.Context, conn *pgconn.PgConn) error {
	if s.warnedTimeout {
		return nil
	}
	res, err := conn.Exec(ctx, "SHOW wal_sender_timeout").ReadAll()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		return nil // the server refused: the connection is still usable
	case err != nil:
		return fmt.Errorf("reading wal_sender_timeout: %w", err)
	case len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1:
		return nil
	}
	wst, ok := parsePGDuration(string(res[0].Rows[0][0]))
	if need := wst/2 + s.cfg.StatusInterval; ok && wst > 0 && s.cfg.ServerTimeout < need {
		s.warnedTimeout = true
		s.log.Warn(s.cfg.Names.Of("ServerTimeout")+" is shorter than the server's wal_sender_timeout/2 plus "+s.cfg.Names.Of("StatusInterval")+": a long transaction of unpublished changes can look like a broken connection",
			"server_timeout", s.cfg.ServerTimeout, "wal_sender_timeout", wst, "status_interval", s.cfg.StatusInterval, "want_at_least", need)
	}
	return nil
}

// parsePGDuration reads a time setting as SHOW prints it: 60s, 1min, 500ms,
// 2h, 0.
func parsePGDuration(v string) (time.Duration, bool) {
	units := []struct {
		suffix string
		d      time.Duration
	}{{"ms", time.Millisecond}, {"min", time.Minute}, {"s", time.Second}, {"h", time.Hour}, {"d", 24 * time.Hour}}
	for _, u := range units {
		if n, found := strings.CutSuffix(v, u.suffix); found {
			i, err := strconv.Atoi(n)
			return time.Duration(i) * u.d, err == nil
		}
	}
	i, err := strconv.Atoi(v) // no unit: milliseconds
	return time.Duration(i) * time.Millisecond, err == nil
}

// setupError says that a session's set-up ran out of time, when it did:
// the error itself is then only a cancelled context or a broken read.
func (s *Streamer) setupError(setup context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(setup), errSetupTimeout) {
		return fmt.Errorf("%w (%s %s): %w", errSetupTimeout, s.cfg.Names.Of("ServerTimeout"), s.cfg.ServerTimeout, err)
	}
	return err
}
