package cdc

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/sqlquote"
	"github.com/outboxd/outboxd/outbox"
)

// connectReplication opens the replication connection derived from the URL.
func (s *Streamer) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	return connectReplication(ctx, s.cfg.DatabaseURL)
}

func connectReplication(ctx context.Context, url string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		// The parse error can quote the whole string, password included.
		return nil, permanent(fmt.Errorf("parsing the database URL: invalid connection string (not shown: it may hold a password)"))
	}
	cfg.RuntimeParams["replication"] = "database"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "outboxd" // shown in pg_stat_replication
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening the replication connection: %w", err)
	}
	return conn, nil
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
}

// checkServer identifies the server at every (re)connect. On a server other
// than the last one, the position this process carried over is not
// trusted: the session starts from the slot's own confirmed position.
func (s *Streamer) checkServer(ctx context.Context, conn *pgconn.PgConn) error {
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return fmt.Errorf("identifying the server: %w", err)
	}
	now := serverID{systemID: sys.SystemID, timeline: sys.Timeline}
	if s.server != (serverID{}) && s.server != now && s.cfg.StopOnServerChange {
		return permanent(fmt.Errorf("the server changed (system identifier %s timeline %d, was %s timeline %d: a failover, a restore or another cluster): exactly-once mode stops here, and the next start reads the progress of the new timeline (the slot's unconfirmed tail is sent again: duplicates, no loss)",
			now.systemID, now.timeline, s.server.systemID, s.server.timeline))
	}
	if s.server != (serverID{}) && s.server != now {
		s.log.Warn("the server changed (failover, restore or another cluster): starting from the slot's own confirmed position, not from what this process confirmed before",
			"slot", s.cfg.Slot, "system_id", now.systemID, "timeline", now.timeline,
			"previous_system_id", s.server.systemID, "previous_timeline", s.server.timeline, "previous_confirmed_lsn", s.confirmed)
		s.confirmed = 0
	}
	s.server = now
	return nil
}

// startReplication issues START_REPLICATION. lsn is the watermark: the
// server starts at the later of it and the slot's confirmed position, and
// skips every transaction whose commit lies before it.
func startReplication(ctx context.Context, conn *pgconn.PgConn, slot, publication string, lsn outbox.LSN) error {
	// publication_names is a list of identifiers in a string literal.
	pubs := sqlquote.Literal(sqlquote.Identifier(publication))
	return pglogrepl.StartReplication(ctx, conn, slot, pglogrepl.LSN(lsn), pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names " + pubs},
	})
}
