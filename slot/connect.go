package slot

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/lib/sqlquote"
)

// Connect opens a regular connection to the database for outboxd's catalog
// queries, named name (an AppName's String; "": "outboxd") unless the URL
// sets application_name; PostgreSQL refusing the credentials is an
// *AuthError (AuthFailure). JIT compilation is off on it unless the URL
// sets jit: the catalog queries are small, but their estimates pass
// jit_above_cost, and compiling them took longer than running them, at
// every start.
func Connect(ctx context.Context, url, name string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, ErrBadURL
	}
	if _, set := cfg.RuntimeParams["jit"]; !set {
		cfg.RuntimeParams["jit"] = "off"
	}
	nameConnection(cfg.RuntimeParams, name)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", AuthFailure(err))
	}
	return conn, nil
}

// ErrBadURL: the database URL does not parse. Its error never quotes the
// URL, which may hold a password.
var ErrBadURL = errors.New("parsing the database URL: invalid connection string (not shown: it may hold a password)")

// ReplicationConfig derives the configuration of a replication connection
// (replication=database) from the database URL, named name in
// pg_stat_replication (an AppName's String; "": "outboxd") unless the URL
// sets application_name. Its error is ErrBadURL.
func ReplicationConfig(url, name string) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		// The parse error can quote the whole string, password included.
		return nil, ErrBadURL
	}
	cfg.RuntimeParams["replication"] = "database"
	nameConnection(cfg.RuntimeParams, name)
	return cfg, nil
}

// nameConnection sets application_name to name ("": outboxd's) unless
// the URL set one.
func nameConnection(params map[string]string, name string) {
	if params["application_name"] != "" {
		return
	}
	if name == "" {
		name = appNamePrefix
	}
	params["application_name"] = name
}

// connectReplication opens a short-lived replication connection for what
// only the replication protocol does: identifying the server
// (IDENTIFY_SYSTEM), creating the slot with an exported snapshot, turning
// failover on. The stream's own connection is package cdc's.
func connectReplication(ctx context.Context, url string) (*pgconn.PgConn, error) {
	cfg, err := ReplicationConfig(url, "")
	if err != nil {
		return nil, err
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening the replication connection: %w", replicationRefused(AuthFailure(err)))
	}
	return conn, nil
}

// ReplicationPrivilegeError is a replication connection PostgreSQL refused
// because the role may not open one: it lacks REPLICATION (SQLSTATE 42501).
// It names the user and the host, never the password.
type ReplicationPrivilegeError struct {
	User, Host string
	Err        *pgconn.PgError
}

func (e *ReplicationPrivilegeError) Error() string {
	return fmt.Sprintf("role %q may not open a replication connection at %s: %s (SQLSTATE %s); grant it REPLICATION (ALTER ROLE %s REPLICATION)",
		e.User, e.Host, e.Err.Message, e.Err.Code, sqlquote.Identifier(e.User))
}

func (e *ReplicationPrivilegeError) Unwrap() error { return e.Err }

// replicationRefused returns a failed replication connection's error as a
// *ReplicationPrivilegeError when the role lacks the privilege (the
// attempts are searched as AuthFailure does: with sslmode=prefer a TLS
// line comes first), and err itself otherwise.
func replicationRefused(err error) error {
	ce, refused := lastRefusal(err, "42501")
	if refused == nil {
		return err
	}
	return &ReplicationPrivilegeError{User: ce.Config.User, Host: net.JoinHostPort(ce.Config.Host, strconv.Itoa(int(ce.Config.Port))), Err: refused}
}

// lastRefusal searches the attempts of a failed connection (pgconn joins
// the errors of every attempt: with sslmode=prefer a TLS attempt comes
// first) for the last PostgreSQL error of one of codes; nil when err is no
// connection's, or no attempt was refused so.
func lastRefusal(err error, codes ...string) (*pgconn.ConnectError, *pgconn.PgError) {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return nil, nil
	}
	attempts := []error{err}
	if joined, ok := ce.Unwrap().(interface{ Unwrap() []error }); ok {
		attempts = joined.Unwrap()
	}
	var refused *pgconn.PgError
	for _, a := range attempts {
		var pgErr *pgconn.PgError
		if errors.As(a, &pgErr) && slices.Contains(codes, pgErr.Code) {
			refused = pgErr
		}
	}
	return ce, refused
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

// AuthFailure returns a failed connection's error as an *AuthError when
// PostgreSQL refused the credentials, and err itself otherwise.
//
// pgconn joins the errors of every attempt: with sslmode=prefer (the
// default) a TLS attempt ("server refused TLS connection") precedes the
// plain one, so the joined text leads with an unrelated TLS line. The
// attempts are searched in turn and the last refusal is kept (an attempt
// whose pg_hba.conf rule did not match is followed by the one that did);
// the AuthError's text is only that refusal's.
func AuthFailure(err error) error {
	ce, refused := lastRefusal(err, "28P01", "28000")
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
