package cdc

import (
	"context"
	"fmt"
	"net"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/lib/rawio"
	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// connectReplication opens the replication connection derived from the
// URL; act, when not nil, learns when bytes arrive on it.
func (s *Streamer) connectReplication(ctx context.Context, act *activity) (*pgconn.PgConn, error) {
	return connectReplicationWatched(ctx, s.cfg.DatabaseURL, s.cfg.ApplicationName, act)
}

// connectReplication is a stream connection nobody watches for activity
// (the tests' own sessions).
func connectReplication(ctx context.Context, url string) (*pgconn.PgConn, error) {
	return connectReplicationWatched(ctx, url, "", nil)
}

func connectReplicationWatched(ctx context.Context, url, name string, act *activity) (*pgconn.PgConn, error) {
	cfg, err := slot.ReplicationConfig(url, name)
	if err != nil {
		return nil, permanent(err)
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
		return nil, fmt.Errorf("opening the replication connection: %w", slot.AuthFailure(err))
	}
	return conn, nil
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
	now := slot.ServerID{SystemID: sys.SystemID, Timeline: sys.Timeline, Database: sys.DBName}
	if err := slot.NoNewerPrimary(ctx, s.cfg.DatabaseURL, now, s.log); err != nil {
		return permanent(err)
	}
	prev := s.ident.get()
	changed, err := serverChange(prev, now, info, s.cfg.Slot, s.cfg.StopOnServerChange, s.cfg.PrimaryURL != "", s.cfg.SlotNames())
	if err != nil {
		return permanent(err)
	}
	walEnd := outbox.LSN(sys.XLogPos)
	fits := carriedFits(s.confirmed, walEnd, info.InRecovery)
	switch {
	case changed:
		s.log.Warn("the server changed (failover, restore or another cluster): starting from the slot's own confirmed position, not from what this process confirmed before",
			"slot", s.cfg.Slot, "system_id", now.SystemID, "timeline", now.Timeline,
			"previous_system_id", prev.SystemID, "previous_timeline", prev.Timeline, "previous_confirmed_lsn", s.confirmed)
		s.confirmed = 0
	case !fits && s.cfg.StopOnServerChange:
		// Exactly-once: the progress topic holds positions of the history
		// the server lost, and would skip the commits it writes anew.
		return permanent(fmt.Errorf("%w: the server's WAL ends at %s, before the position %s this process confirmed on the same system %s and timeline %d: "+
			"its storage was rolled back (a restore or a snapshot without a new timeline); exactly-once mode stops, as on a server change, and the next start refuses progress past the WAL end",
			slot.ErrUnusable, walEnd, s.confirmed, now.SystemID, now.Timeline))
	case !fits:
		s.log.Warn("the server's WAL ends before the position this process confirmed, on the same system and timeline: its storage was rolled back (a restore or a snapshot without a new timeline); "+
			"starting from the slot's own confirmed position, not from what this process confirmed before (records after it are sent again)",
			"slot", s.cfg.Slot, "wal_end", walEnd, "previous_confirmed_lsn", s.confirmed, "slot_confirmed_lsn", info.ConfirmedFlushLSN)
		s.confirmed = 0
	}
	s.ident.set(now, walEndBound(walEnd, info.InRecovery))
	return nil
}

// walEndBound is the WAL end the exactly-once sink may hold its progress
// against (Server): a standby's is none (0), for the reason carriedFits
// gives.
func walEndBound(walEnd outbox.LSN, onStandby bool) outbox.LSN {
	if onStandby {
		return 0
	}
	return walEnd
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
//
// On a standby (onStandby) every carried position fits: a standby that
// restarted replays its WAL again, and until it is through, its WAL end
// trails what this process confirmed there; it receives the same history
// from the primary, so the position stays valid. Dropping it would start
// from the slot's own confirmed position, which a standby's crash takes
// back to its last restartpoint (seen in the chaos run: tens of
// thousands of records sent again after one crash).
func carriedFits(carried, walEnd outbox.LSN, onStandby bool) bool {
	return onStandby || carried <= walEnd
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
func serverChange(prev, now slot.ServerID, info slot.Status, slotName string, stopOnChange, decodingOnStandby bool, names field.Names) (changed bool, err error) {
	if prev == (slot.ServerID{}) || prev == now {
		return false, nil
	}
	switch {
	case prev.SystemID == now.SystemID && now.Timeline < prev.Timeline:
		return true, slot.OldPrimaryError(now, prev.Timeline, "this process streamed from")
	case stopOnChange:
		return true, fmt.Errorf("the server changed (system identifier %s timeline %d, was %s timeline %d: a failover, a restore or another cluster): exactly-once mode stops here, and the next start reads the progress of the new timeline (the slot's unconfirmed tail is sent again: duplicates, no loss)",
			now.SystemID, now.Timeline, prev.SystemID, prev.Timeline)
	case prev.SystemID == now.SystemID && !slot.TrustedAcrossTimeline(info, decodingOnStandby):
		return true, slot.UnsyncedError(slotName, slot.Record{SystemID: prev.SystemID, Timeline: prev.Timeline}, now.Timeline, info.ServerVersion, names)
	}
	return true, nil
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
