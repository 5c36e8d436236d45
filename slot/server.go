package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"
)

// ServerID tells servers and their histories apart: a promoted standby or
// a restored backup has another timeline or system identifier, and its
// LSNs are not comparable with the old server's.
type ServerID struct {
	SystemID string
	Timeline int32
	// Database is the database the replication connection is on
	// (IDENTIFY_SYSTEM's dbname), where it is known: with SystemID it
	// names the records' source.
	Database string
}

// Identify returns the identity of the server the database URL reaches
// (IDENTIFY_SYSTEM on a replication connection, which a slot's user can
// always open).
func Identify(ctx context.Context, url string) (ServerID, error) {
	conn, err := connectReplication(ctx, url)
	if err != nil {
		return ServerID{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return ServerID{}, fmt.Errorf("identifying the server: %w", err)
	}
	return ServerID{SystemID: sys.SystemID, Timeline: sys.Timeline, Database: sys.DBName}, nil
}

// OldPrimaryError refuses server now, which is on an older timeline of its
// system than newer, as seenOn says where newer was seen: an old primary
// that came back after a failover. It wraps ErrUnusable.
func OldPrimaryError(now ServerID, newer int32, seenOn string) error {
	return fmt.Errorf("%w: the server is system %s timeline %d, but %s timeline %d of the same system: "+
		"this is an old primary that came back after a failover, and its history forked from the one outboxd follows; "+
		"refusing to stream from it (make it a standby of the new primary, or take it out of the database URL)",
		ErrUnusable, now.SystemID, now.Timeline, seenOn, newer)
}

// NoNewerPrimary refuses (OldPrimaryError) a server that another host of
// the database URL shows to be an old primary: see newerPrimary. Neither a
// slot is created or backfilled, nor a stream started, on such a server.
func NoNewerPrimary(ctx context.Context, url string, now ServerID, log *slog.Logger) error {
	if newer, host := newerPrimary(ctx, url, now, log); newer > 0 {
		return OldPrimaryError(now, newer, "host "+host+" of the database URL is a primary on")
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
func newerPrimary(ctx context.Context, url string, now ServerID, log *slog.Logger) (int32, string) {
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
	ids := make([]ServerID, len(hosts))
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
		if primary[i] && ids[i].SystemID == now.SystemID && ids[i].Timeline > now.Timeline && ids[i].Timeline > newest {
			newest, newestHost = ids[i].Timeline, addrs[i]
		}
	}
	return newest, newestHost
}

// identifyHost identifies one host and says whether it is a primary.
func identifyHost(ctx context.Context, cfg *pgconn.Config) (ServerID, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return ServerID{}, false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return ServerID{}, false, fmt.Errorf("identifying the server: %w", err)
	}
	res, err := conn.Exec(ctx, "SELECT pg_catalog.pg_is_in_recovery()").ReadAll()
	switch {
	case err != nil:
		return ServerID{}, false, fmt.Errorf("asking whether the server is in recovery: %w", err)
	case len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1:
		return ServerID{}, false, errors.New("asking whether the server is in recovery: unexpected result shape")
	}
	return ServerID{SystemID: sys.SystemID, Timeline: sys.Timeline}, string(res[0].Rows[0][0]) == "f", nil
}
