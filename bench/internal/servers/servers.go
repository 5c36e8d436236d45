// Package servers is a benchmark's own PostgreSQL and Kafka, started
// through the test bed (harness/testbed/testbed.sh) and removed when the
// benchmark ends, and what the benchmarks do on them: statements on a
// database, server settings, topics. It is shared by
// bench/cmd/outboxd-bench and bench/cmd/fleet-bench.
package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testbed"
)

// Partitions is the partition count of every topic a benchmark creates.
const Partitions = 6

// Servers is one PostgreSQL cluster and one Kafka broker, private to a
// benchmark.
type Servers struct {
	PG    *testbed.Postgres
	Kafka *testbed.Kafka
}

// Start starts both through the test bed script, PostgreSQL durable as in
// production: the test bed turns fsync off for test speed, which would
// flatter every system that commits (the relay, the writers). The caller
// must Remove them, also when its context was cancelled.
func Start(ctx context.Context, script string) (_ *Servers, err error) {
	s := &Servers{}
	defer func() {
		if err != nil {
			_ = s.Remove(context.WithoutCancel(ctx))
		}
	}()
	// Started whole even when ctx ends meanwhile (a Ctrl-C): a server
	// whose start was cut short could be left running, its directory gone.
	start := context.WithoutCancel(ctx)
	if s.PG, err = testbed.StartPostgres(start, script); err != nil {
		return nil, fmt.Errorf("starting PostgreSQL: %w", err)
	}
	if s.Kafka, err = testbed.StartKafkaTemp(start, script); err != nil {
		return nil, fmt.Errorf("starting Kafka: %w", err)
	}
	if err := s.Exec(ctx, "postgres", "ALTER SYSTEM SET fsync = on", "ALTER SYSTEM SET full_page_writes = on", "SELECT pg_reload_conf()"); err != nil {
		return nil, fmt.Errorf("making PostgreSQL durable: %w", err)
	}
	return s, nil
}

// Remove stops both servers and deletes their state; either may be
// missing (a failed Start).
func (s *Servers) Remove(ctx context.Context) error {
	var errs []error
	if s.Kafka != nil {
		errs = append(errs, s.Kafka.Remove(ctx))
	}
	if s.PG != nil {
		errs = append(errs, s.PG.Remove(ctx))
	}
	return errors.Join(errs...)
}

// Restart sets PostgreSQL settings that take effect only at the server's
// start (ALTER SYSTEM SET name = value, each given as "name = value") and
// restarts it.
func (s *Servers) Restart(ctx context.Context, settings ...string) error {
	stmts := make([]string, len(settings))
	for i, set := range settings {
		stmts[i] = "ALTER SYSTEM SET " + set
	}
	if err := s.Exec(ctx, "postgres", stmts...); err != nil {
		return err
	}
	if err := s.PG.Stop(ctx, "fast"); err != nil {
		return fmt.Errorf("restarting PostgreSQL for %s: %w", strings.Join(settings, ", "), err)
	}
	if err := s.PG.Start(ctx); err != nil {
		return fmt.Errorf("restarting PostgreSQL for %s: %w", strings.Join(settings, ", "), err)
	}
	return nil
}

// HostPort is PostgreSQL's host and port, for a client that takes them
// apart (Debezium's connector).
func (s *Servers) HostPort() (host, port string, err error) {
	u, err := url.Parse(s.PG.URL)
	if err != nil {
		return "", "", fmt.Errorf("the test bed's database URL: %w", err)
	}
	return u.Hostname(), u.Port(), nil
}

// SetUpDebezium gives database db Debezium's outbox table and publication
// (schema.sql beside runSh, bench/debezium/run.sh) and creates slot for it,
// so that the connector streams from before what is written next.
func (s *Servers) SetUpDebezium(ctx context.Context, runSh, db, slot string) error {
	schema, err := os.ReadFile(filepath.Join(filepath.Dir(runSh), "schema.sql"))
	if err != nil {
		return fmt.Errorf("reading Debezium's schema: %w", err)
	}
	if err := s.Exec(ctx, db, string(schema), fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, slot)); err != nil {
		return fmt.Errorf("setting Debezium's outbox and slot %s up in %s: %w", slot, db, err)
	}
	return nil
}

// DatabaseURL is a superuser URL of database db.
func (s *Servers) DatabaseURL(db string) string {
	return strings.Replace(s.PG.URL, "/postgres?", "/"+db+"?", 1)
}

// Exec runs statements, one after another, on database db.
func (s *Servers) Exec(ctx context.Context, db string, stmts ...string) error {
	return ExecOn(ctx, s.DatabaseURL(db), stmts...)
}

// ExecOn runs statements, one after another, on the database dbURL
// reaches (another server's: a standby of PG).
func ExecOn(ctx context.Context, dbURL string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%.60s...: %w", stmt, err)
		}
	}
	return nil
}

// QueryRow scans the one row of q into dst on a connection of its own to
// dbURL.
func QueryRow(ctx context.Context, dbURL, q string, dst any, args ...any) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, q, args...).Scan(dst)
}

// OnDatabase is the server URL with database db instead of its own.
func OnDatabase(server, db string) string {
	u, err := url.Parse(server)
	if err != nil {
		return server
	}
	u.Path = "/" + db
	return u.String()
}

// Admin is an admin client of the broker; the caller closes it.
func (s *Servers) Admin() *kadm.Client {
	cl, _ := kgo.NewClient(kgo.SeedBrokers(s.Kafka.Addr))
	return kadm.NewClient(cl)
}

// CreateTopics creates topics of Partitions partitions.
func (s *Servers) CreateTopics(ctx context.Context, topics ...string) error {
	adm := s.Admin()
	defer adm.Close()
	resp, err := adm.CreateTopics(ctx, Partitions, 1, nil, topics...)
	if err != nil {
		return err
	}
	return resp.Error()
}

// FreeAddr returns a loopback address with a port nothing listens on,
// chosen by the kernel: fine for a process or two (see FreeAddrFrom).
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// FreeAddrFrom returns a loopback address with a port nothing listens on,
// for many processes. The port is taken below the kernel's ephemeral range, from a counter
// the caller keeps (next, advanced past the port returned): a port the
// kernel chose itself would be free to be handed out again, as the local
// port of a connection, before the process given it binds it, and a
// hundred processes each opening connections made that happen.
func FreeAddrFrom(next *int) (string, error) {
	for ; *next < ephemeralStart; *next++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *next))
		if err != nil {
			continue // in use
		}
		addr := l.Addr().String()
		l.Close()
		*next++
		return addr, nil
	}
	return "", fmt.Errorf("no free port below %d", ephemeralStart)
}

// FirstPort is where a FreeAddrFrom counter starts; ephemeralStart is the
// Linux default start of the ephemeral range (net.ipv4.ip_local_port_range).
const (
	FirstPort      = 20000
	ephemeralStart = 32768
)
