package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/internal/rawio"
	"github.com/outboxd/outboxd/internal/sqlquote"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// connectReplication opens the replication connection derived from the
// URL; act, when not nil, learns when bytes arrive on it.
func (s *Streamer) connectReplication(ctx context.Context, act *activity) (*pgconn.PgConn, error) {
	return connectReplicationWatched(ctx, s.cfg.DatabaseURL, act)
}

func connectReplication(ctx context.Context, url string) (*pgconn.PgConn, error) {
	return connectReplicationWatched(ctx, url, nil)
}

func connectReplicationWatched(ctx context.Context, url string, act *activity) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		// The parse error can quote the whole string, password included.
		return nil, permanent(fmt.Errorf("parsing the database URL: invalid connection string (not shown: it may hold a password)"))
	}
	cfg.RuntimeParams["replication"] = "database"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "outboxd" // shown in pg_stat_replication
	}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Raw reads and writes: the stream wakes the process once or twice
		// per transaction (package rawio).
		c = rawio.Wrap(c)
		if act != nil {
			c = &activityConn{Conn: c, a: act}
		}
		return c, nil
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening the replication connection: %w", authFailure(err))
	}
	return conn, nil
}

// AuthError is a connection PostgreSQL refused for who was connecting: a
// wrong password (SQLSTATE 28P01 invalid_password), or a role or a
// pg_hba.conf rule that does not let the user in (28000
// invalid_authorization_specification). Retrying with the same database
// URL does not help until someone changes the server's side. It names the
// user and the host(s), never the password.
type AuthError struct {
	User string
	Host string // host:port, several comma-separated
	Err  *pgconn.PgError
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("authentication failed for user %q at %s: %s (SQLSTATE %s); check the user name and password of the database URL, and the server's pg_hba.conf",
		e.User, e.Host, e.Err.Message, e.Err.Code)
}

func (e *AuthError) Unwrap() error { return e.Err }

// authFailure returns a failed connection's error as an *AuthError when
// PostgreSQL refused the credentials, and err itself otherwise.
//
// pgconn joins the errors of every attempt: with sslmode=prefer (the
// default) a TLS attempt ("server refused TLS connection") precedes the
// plain one, so the joined text leads with an unrelated TLS line. The
// attempts are searched in turn and the last refusal is kept (an attempt
// whose pg_hba.conf rule did not match is followed by the one that did);
// the AuthError's text is only that refusal's.
func authFailure(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return err
	}
	attempts := []error{err}
	if joined, ok := ce.Unwrap().(interface{ Unwrap() []error }); ok {
		attempts = joined.Unwrap()
	}
	var refused *pgconn.PgError
	for _, a := range attempts {
		var pgErr *pgconn.PgError
		if errors.As(a, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000") {
			refused = pgErr
		}
	}
	if refused == nil {
		return err
	}
	hosts := []string{net.JoinHostPort(ce.Config.Host, strconv.Itoa(int(ce.Config.Port)))}
	for _, fb := range ce.Config.Fallbacks {
		// Fallbacks repeat each host for its TLS and plain attempts.
		if h := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return &AuthError{User: ce.Config.User, Host: strings.Join(hosts, ","), Err: refused}
}

// IdentifyServer returns the server's system identifier and timeline
// (IDENTIFY_SYSTEM on a replication connection, which a slot's user can
// always open).
func IdentifyServer(ctx context.Context, url string) (systemID string, timeline int32, err error) {
	conn, err := connectReplication(ctx, url)
	if err != nil {
		return "", 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return "", 0, fmt.Errorf("identifying the server: %w", err)
	}
	return sys.SystemID, sys.Timeline, nil
}

// serverID tells servers and their histories apart: a promoted standby or
// a restored backup has another timeline or system identifier, and its
// LSNs are not comparable with the old server's.
type serverID struct {
	systemID string
	timeline int32
	// database is the database the replication connection is on
	// (IDENTIFY_SYSTEM's dbname), where it is known: with systemID it
	// names the records' source (Streamer.columns).
	database string
}

// checkServer identifies the server at every (re)connect and applies
// serverChange (info: the slot on this server). On a server other than
// the last one, the position this process carried over is not trusted:
// the session starts from the slot's own confirmed position.
func (s *Streamer) checkServer(ctx context.Context, conn *pgconn.PgConn, info slot.Status) error {
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return fmt.Errorf("identifying the server: %w", err)
	}
	now := serverID{systemID: sys.SystemID, timeline: sys.Timeline, database: sys.DBName}
	if err := noNewerPrimary(ctx, s.cfg.DatabaseURL, now, s.log); err != nil {
		return err
	}
	prev := s.ident.get()
	changed, err := serverChange(prev, now, info, s.cfg.Slot, s.cfg.StopOnServerChange)
	if err != nil {
		return permanent(err)
	}
	walEnd := outbox.LSN(sys.XLogPos)
	fits := carriedFits(s.confirmed, walEnd)
	switch {
	case changed:
		s.log.Warn("the server changed (failover, restore or another cluster): starting from the slot's own confirmed position, not from what this process confirmed before",
			"slot", s.cfg.Slot, "system_id", now.systemID, "timeline", now.timeline,
			"previous_system_id", prev.systemID, "previous_timeline", prev.timeline, "previous_confirmed_lsn", s.confirmed)
		s.confirmed = 0
	case !fits && s.cfg.StopOnServerChange:
		// Exactly-once: the progress topic holds positions of the history
		// the server lost, and would skip the commits it writes anew.
		return permanent(fmt.Errorf("%w: the server's WAL ends at %s, before the position %s this process confirmed on the same system %s and timeline %d: "+
			"its storage was rolled back (a restore or a snapshot without a new timeline); exactly-once mode stops, as on a server change, and the next start refuses progress past the WAL end",
			slot.ErrUnusable, walEnd, s.confirmed, now.systemID, now.timeline))
	case !fits:
		s.log.Warn("the server's WAL ends before the position this process confirmed, on the same system and timeline: its storage was rolled back (a restore or a snapshot without a new timeline); "+
			"starting from the slot's own confirmed position, not from what this process confirmed before (records after it are sent again)",
			"slot", s.cfg.Slot, "wal_end", walEnd, "previous_confirmed_lsn", s.confirmed, "slot_confirmed_lsn", info.ConfirmedFlushLSN)
		s.confirmed = 0
	}
	s.ident.set(now, walEnd)
	return nil
}

// carriedFits reports whether the position a process carried over from an
// earlier session of the same server and timeline still fits the server:
// it cannot be past the server's WAL end. A position past it points into
// a history the server no longer has (its storage was rolled back without
// a new timeline), and starting there would skip the commits it writes
// anew below that position. (A position at or below the WAL end cannot be
// told from a rollback followed by new writes past it: the system and
// timeline are the same; the slot's own position is then trusted as
// before.)
func carriedFits(carried, walEnd outbox.LSN) bool {
	return carried <= walEnd
}

// serverChange decides what a session on server now may do after one on
// prev (zero before the first session), the slot on now being info. It
// reports whether the server changed (the carried-over position is then
// dropped), or an error that stops the process:
//   - an older timeline of the same system than prev: an old primary that
//     came back after a failover, whose history forked from the one
//     outboxd follows;
//   - any change, when stopOnChange (exactly-once: the next start reads
//     the new timeline's progress);
//   - a new timeline of the same system (a promoted standby) whose slot
//     was not synchronized from the old primary (slot.SyncedAcrossFailover).
func serverChange(prev, now serverID, info slot.Status, slotName string, stopOnChange bool) (changed bool, err error) {
	if prev == (serverID{}) || prev == now {
		return false, nil
	}
	switch {
	case prev.systemID == now.systemID && now.timeline < prev.timeline:
		return true, oldPrimaryError(now, prev.timeline, "this process streamed from")
	case stopOnChange:
		return true, fmt.Errorf("the server changed (system identifier %s timeline %d, was %s timeline %d: a failover, a restore or another cluster): exactly-once mode stops here, and the next start reads the progress of the new timeline (the slot's unconfirmed tail is sent again: duplicates, no loss)",
			now.systemID, now.timeline, prev.systemID, prev.timeline)
	case prev.systemID == now.systemID && !slot.SyncedAcrossFailover(info):
		return true, slot.UnsyncedError(slotName, slot.Record{SystemID: prev.systemID, Timeline: prev.timeline}, now.timeline, info.ServerVersion)
	}
	return true, nil
}

func oldPrimaryError(now serverID, newer int32, where string) error {
	return fmt.Errorf("%w: the server is system %s timeline %d, but %s timeline %d of the same system: "+
		"this is an old primary that came back after a failover, and its history forked from the one outboxd follows; "+
		"refusing to stream from it (make it a standby of the new primary, or take it out of the database URL)",
		slot.ErrUnusable, now.systemID, now.timeline, where, newer)
}

// noNewerPrimary refuses (permanently) a server that another host of the
// database URL shows to be an old primary: see newerPrimary.
func noNewerPrimary(ctx context.Context, url string, now serverID, log *slog.Logger) error {
	if newer, host := newerPrimary(ctx, url, now, log); newer > 0 {
		return permanent(oldPrimaryError(now, newer, "host "+host+" of the database URL is a primary on"))
	}
	return nil
}

// newerPrimary asks every host of a multi-host database URL (as users
// list a primary and its standbys, with target_session_attrs=read-write),
// all at once, for its system identifier, timeline and whether it is in
// recovery, and returns the newest timeline of a primary of now's system
// that is newer than now's, with its host; 0 when there is none or the URL
// names one host. Hosts that do not answer within a few seconds are left
// out (logged at debug): the check guards against an old primary that came
// back, it is not a health check.
func newerPrimary(ctx context.Context, url string, now serverID, log *slog.Logger) (int32, string) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return 0, ""
	}
	// Fallbacks also hold each host's TLS and plain variants (sslmode
	// prefer): one attempt per host:port, the first variant.
	seen := map[string]bool{}
	var hosts []*pgconn.FallbackConfig
	var addrs []string // host:port of each of hosts
	for _, h := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...) {
		addr := net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port)))
		if !seen[addr] {
			seen[addr] = true
			hosts, addrs = append(hosts, h), append(addrs, addr)
		}
	}
	if len(hosts) < 2 {
		return 0, ""
	}
	ids := make([]serverID, len(hosts))
	primary := make([]bool, len(hosts))
	var g errgroup.Group
	for i, h := range hosts {
		one := cfg.Copy()
		one.Host, one.Port, one.TLSConfig, one.Fallbacks = h.Host, h.Port, h.TLSConfig, nil
		one.ValidateConnect = nil // every host, whatever target_session_attrs says
		one.RuntimeParams["replication"] = "database"
		g.Go(func() error {
			var err error
			if ids[i], primary[i], err = identifyHost(ctx, one); err != nil {
				log.Debug("could not ask a host of the database URL for its timeline", "host", addrs[i], "err", err)
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines only log
	var newest int32
	var newestHost string
	for i := range hosts {
		if primary[i] && ids[i].systemID == now.systemID && ids[i].timeline > now.timeline && ids[i].timeline > newest {
			newest, newestHost = ids[i].timeline, addrs[i]
		}
	}
	return newest, newestHost
}

func identifyHost(ctx context.Context, cfg *pgconn.Config) (serverID, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return serverID{}, false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return serverID{}, false, fmt.Errorf("identifying the server: %w", err)
	}
	res, err := conn.Exec(ctx, "SELECT pg_catalog.pg_is_in_recovery()").ReadAll()
	switch {
	case err != nil:
		return serverID{}, false, fmt.Errorf("asking whether the server is in recovery: %w", err)
	case len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1:
		return serverID{}, false, errors.New("asking whether the server is in recovery: unexpected result shape")
	}
	return serverID{systemID: sys.SystemID, timeline: sys.Timeline}, string(res[0].Rows[0][0]) == "f", nil
}

// startReplication issues START_REPLICATION. lsn is the watermark: the
// server starts at the later of it and the slot's confirmed position, and
// skips every transaction whose commit lies before it. messages asks
// pgoutput for logical decoding messages too (table-less events).
func startReplication(ctx context.Context, conn *pgconn.PgConn, slot, publication string, lsn outbox.LSN, messages bool) error {
	// publication_names is a list of identifiers in a string literal.
	pubs := sqlquote.Literal(sqlquote.Identifier(publication))
	args := []string{"proto_version '1'", "publication_names " + pubs}
	if messages {
		args = append(args, "messages 'true'")
	}
	return pglogrepl.StartReplication(ctx, conn, slot, pglogrepl.LSN(lsn), pglogrepl.StartReplicationOptions{PluginArgs: args})
}
