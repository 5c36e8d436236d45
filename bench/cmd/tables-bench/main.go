// Command tables-bench measures the "schemas, not databases" recipe of
// issue 52: N outbox tables in one database (a schema each) through one
// publication and one slot, beside N databases through N slots (one
// outboxd process with a pipelines file of N pipelines), at the same total
// write rate spread evenly over the N outboxes, in one run on the same
// PostgreSQL and Kafka, the two arms interleaved repetition by repetition.
// Every walsender decodes the whole server's WAL, so N slots decode it N
// times. For each run it reads the CPU of the server's walsenders, of the
// whole server and of outboxd, and the latency of every event from its
// commit to its receipt by a Kafka consumer. It writes results.json and
// README.md into -out.
//
//	make bench-tables    (not part of make test)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/bench/internal/cmdline"
	"github.com/outboxd/outboxd/bench/internal/host"
	"github.com/outboxd/outboxd/bench/internal/servers"
	"github.com/outboxd/outboxd/bench/internal/stats"
	"github.com/outboxd/outboxd/bench/internal/steady"
)

type options struct {
	outboxd, testbed, out string
	n, reps, txSize       int
	rates                 []int
	duration              time.Duration
	standby               bool
}

// Arms.
const (
	armTables    = "tables"    // N tables, one slot
	armDatabases = "databases" // N databases, N slots
	// N databases, N slots on a physical standby (-standby).
	armDatabasesOnStandby = "databases-on-standby"
)

type result struct {
	Arm  string `json:"arm"`
	Rate int    `json:"target_events_per_second"`
	Rep  int    `json:"rep"`
	steady.Result
	WalsenderCPUus float64 `json:"walsender_cpu_us_per_event"`
	ServerCPUus    float64 `json:"server_cpu_us_per_event"`
	// StandbyCPUus is the standby's (-standby), in every arm: it replays
	// the same WAL in each, and decodes too in databases-on-standby.
	StandbyCPUus float64 `json:"standby_cpu_us_per_event,omitempty"`
	OutboxdCPUus float64 `json:"outboxd_cpu_us_per_event"`
	MachineBusy  float64 `json:"machine_cpu_busy"`
}

type summary struct {
	Arm            string       `json:"arm"`
	Rate           int          `json:"target_events_per_second"`
	WrittenRate    stats.Spread `json:"written_events_per_second"`
	P50ms          stats.Spread `json:"p50_ms"`
	P99ms          stats.Spread `json:"p99_ms"`
	WalsenderCPUus stats.Spread `json:"walsender_cpu_us_per_event"`
	ServerCPUus    stats.Spread `json:"server_cpu_us_per_event"`
	StandbyCPUus   stats.Spread `json:"standby_cpu_us_per_event"`
	OutboxdCPUus   stats.Spread `json:"outboxd_cpu_us_per_event"`
	NotDelivered   int          `json:"events_not_delivered"`
}

type report struct {
	When      time.Time         `json:"when"`
	Command   string            `json:"command"`
	Host      map[string]string `json:"host"`
	PGVersion string            `json:"postgres_version"`
	Outboxes  int               `json:"outboxes"`
	Standby   bool              `json:"standby"`
	TxSize    int               `json:"transaction_size"`
	DurationS float64           `json:"rate_duration_seconds"`
	Runs      []result          `json:"runs"`
	Summary   []summary         `json:"summary"`
}

func main() {
	var o options
	rates := flag.String("rates", "1000,10000", "total steady write rates, events/s, spread evenly over the outboxes")
	flag.StringVar(&o.outboxd, "outboxd", "bin/outboxd", "outboxd binary")
	flag.StringVar(&o.testbed, "testbed", "harness/testbed/testbed.sh", "test bed script")
	flag.StringVar(&o.out, "out", "docs/bench/tables", "output directory")
	flag.IntVar(&o.n, "outboxes", 100, "outbox tables in the one database, and databases in the other arm")
	flag.IntVar(&o.reps, "reps", 5, "repetitions of each rate and arm")
	flag.IntVar(&o.txSize, "transaction-size", 10, "events per transaction")
	flag.DurationVar(&o.duration, "rate-duration", 10*time.Second, "how long each steady rate is written")
	flag.BoolVar(&o.standby, "standby", false, "also measure the N databases with their N slots on a physical standby (--primary-url; PostgreSQL 16+), the standby's CPU in every arm")
	flag.Parse()
	var err error
	if o.rates, err = cmdline.PositiveInts("rates", *rates); err != nil {
		fmt.Fprintln(os.Stderr, "tables-bench:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, "tables-bench:", err)
		os.Exit(1)
	}
}

// setup is what both arms stream: their targets (one per outbox) and the
// outboxd command line that streams them.
type setup struct {
	targets []steady.Target
	args    []string
	slots   []slotAt // every slot the arm streams, to wait for
}

// slotAt is a slot and its server's URL (a standby's, or the primary's);
// primary is the primary's URL when it is a standby's.
type slotAt struct{ url, slot, primary string }

func run(ctx context.Context, o options, log *slog.Logger) error {
	srv, err := servers.Start(ctx, o.testbed)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Remove(context.WithoutCancel(ctx)) }()
	limit := strconv.Itoa(o.n + 20)
	if err := srv.Restart(ctx, "max_replication_slots = "+limit, "max_wal_senders = "+limit, "max_connections = "+strconv.Itoa(3*o.n+100)); err != nil {
		return err
	}
	var standbyDir, standbyURL string
	if o.standby {
		// Made first, so that the databases reach it through replication.
		sb, err := srv.PG.StartStandby(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("starting the standby: %w", err)
		}
		defer func() { _ = sb.Remove(context.WithoutCancel(ctx)) }()
		standbyDir = sb.Dir
		standbyURL = sb.URL
		// Its own limits: a slot for each database; and none of them
		// taken by copies of the primary arm's failover slots (17+).
		stmts := []string{"ALTER SYSTEM SET max_replication_slots = " + limit, "ALTER SYSTEM SET max_wal_senders = " + limit}
		var version int
		if err := servers.QueryRow(ctx, sb.URL, `SELECT current_setting('server_version_num')::int`, &version); err != nil {
			return err
		}
		if version >= 170000 {
			stmts = append(stmts, "ALTER SYSTEM SET sync_replication_slots = off")
		}
		if err := servers.ExecOn(ctx, sb.URL, stmts...); err != nil {
			return err
		}
		if err := sb.Stop(ctx, "fast"); err != nil {
			return err
		}
		if err := sb.Start(ctx); err != nil {
			return err
		}
	}
	topics := make([]string, o.n)
	for i := range topics {
		topics[i] = fmt.Sprintf("tables-bench.t%03d", i)
	}
	if err := srv.CreateTopics(ctx, topics...); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tables-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	log.Info("setting up", "outboxes", o.n)
	tables, err := setUpTables(ctx, o, srv, topics)
	if err != nil {
		return err
	}
	dbs, err := setUpDatabases(ctx, o, srv, topics, filepath.Join(dir, "pipelines.yaml"), "")
	if err != nil {
		return err
	}
	arms := map[string]setup{armTables: tables, armDatabases: dbs}
	names := []string{armTables, armDatabases}
	if o.standby {
		if arms[armDatabasesOnStandby], err = setUpDatabases(ctx, o, srv, topics, filepath.Join(dir, "standby.yaml"), standbyURL); err != nil {
			return err
		}
		names = append(names, armDatabasesOnStandby)
	}
	var version string
	if err := servers.QueryRow(ctx, srv.DatabaseURL("postgres"), `SELECT current_setting('server_version')`, &version); err != nil {
		return err
	}
	rep := report{When: time.Now().UTC(), Command: cmdline.Join(append([]string{"tables-bench"}, os.Args[1:]...)), Host: host.Describe(),
		PGVersion: version, Outboxes: o.n, Standby: o.standby, TxSize: o.txSize, DurationS: o.duration.Seconds()}
	for _, rate := range o.rates {
		for i := range o.reps {
			order := slices.Clone(names)
			if i%2 == 1 {
				slices.Reverse(order)
			}
			for _, arm := range order {
				r, err := oneRun(ctx, o, srv, standbyDir, arms[arm], arm, rate, i+1)
				if err != nil {
					return fmt.Errorf("%s at %d events/s, repetition %d: %w", arm, rate, i+1, err)
				}
				log.Info("run", "arm", arm, "rate", rate, "rep", i+1, "p99_ms", r.P99ms, "walsender_cpu_us_per_event", r.WalsenderCPUus,
					"server_cpu_us_per_event", r.ServerCPUus, "outboxd_cpu_us_per_event", r.OutboxdCPUus, "written", r.Written, "delivered", r.Delivered)
				rep.Runs = append(rep.Runs, r)
			}
		}
	}
	rep.Summary = summarize(rep.Runs, o.rates, names)
	return write(o.out, rep)
}

// setUpTables makes database shared with a schema and a default outbox
// table for each outbox, all in publication outboxd, and slot
// tables_bench over it (migrate --extend-publication).
func setUpTables(ctx context.Context, o options, srv *servers.Servers, topics []string) (setup, error) {
	var s setup
	if err := srv.Exec(ctx, "postgres", "CREATE DATABASE shared"); err != nil {
		return s, err
	}
	url := srv.DatabaseURL("shared")
	for i := range o.n {
		schema := fmt.Sprintf("svc%03d", i)
		if err := srv.Exec(ctx, "shared", "CREATE SCHEMA "+schema); err != nil {
			return s, err
		}
		args := []string{"migrate", "--log-level", "warn", "--database-url", url, "--slot", "tables_bench", "--table", schema + ".outbox", "--extend-publication"}
		if out, err := exec.CommandContext(ctx, o.outboxd, args...).CombinedOutput(); err != nil {
			return s, fmt.Errorf("outboxd migrate %s.outbox: %w\n%s", schema, err, out)
		}
		s.targets = append(s.targets, steady.Target{URL: url, Topic: topics[i], Writers: 1,
			Insert: strings.Replace(steady.OutboxInsert(o.txSize), "INSERT INTO outbox", "INSERT INTO "+schema+".outbox", 1)})
	}
	s.args = []string{"run", "--log-level", "warn", "--database-url", url, "--slot", "tables_bench", "--brokers", srv.Kafka.Addr}
	s.slots = []slotAt{{url: url, slot: "tables_bench"}}
	return s, nil
}

// setUpDatabases makes a database, default outbox table, publication and
// slot for each outbox, and the pipelines file of one process streaming
// them all, written to file. With standbyURL the databases exist already
// (the primary arm made them) and each slot is made on that standby.
func setUpDatabases(ctx context.Context, o options, srv *servers.Servers, topics []string, file, standbyURL string) (setup, error) {
	var s setup
	var f strings.Builder
	fmt.Fprintf(&f, "brokers: %q\nlog-level: \"warn\"\npipelines:\n", srv.Kafka.Addr)
	for i := range o.n {
		db := fmt.Sprintf("db%03d", i)
		primary, url, slotName := srv.DatabaseURL(db), srv.DatabaseURL(db), "bench_"+db
		args := []string{"migrate", "--log-level", "warn", "--database-url", url, "--slot", slotName}
		if standbyURL == "" {
			if err := srv.Exec(ctx, "postgres", "CREATE DATABASE "+db); err != nil {
				return s, err
			}
		} else {
			url, slotName = servers.OnDatabase(standbyURL, db), "standby_"+db
			args = []string{"migrate", "--log-level", "warn", "--database-url", url, "--primary-url", primary, "--slot", slotName}
		}
		if out, err := exec.CommandContext(ctx, o.outboxd, args...).CombinedOutput(); err != nil {
			return s, fmt.Errorf("outboxd migrate %s: %w\n%s", db, err, out)
		}
		v, _ := json.Marshal(url)
		fmt.Fprintf(&f, "  - name: %s\n    database-url: %s\n    slot: %q\n", db, v, slotName)
		if standbyURL != "" {
			p, _ := json.Marshal(primary)
			fmt.Fprintf(&f, "    primary-url: %s\n", p)
		}
		s.targets = append(s.targets, steady.Target{URL: primary, Topic: topics[i], Writers: 1, Insert: steady.OutboxInsert(o.txSize)})
		s.slots = append(s.slots, slotAt{url: url, slot: slotName, primary: primary})
	}
	if err := os.WriteFile(file, []byte(f.String()), 0o600); err != nil {
		return s, err
	}
	s.args = []string{"run", "--config", file}
	return s, nil
}

// oneRun starts the arm's outboxd, waits until each of its slots streams
// and has caught up with the server's WAL (the other arm's runs wrote in
// between), writes at rate for the duration, and reads what it cost.
func oneRun(ctx context.Context, o options, srv *servers.Servers, standbyDir string, s setup, arm string, rate, repN int) (result, error) {
	res := result{Arm: arm, Rate: rate, Rep: repN}
	cmd := exec.CommandContext(ctx, o.outboxd, s.args...)
	logFile, err := os.CreateTemp("", "tables-bench-outboxd-*.log")
	if err != nil {
		return res, err
	}
	defer os.Remove(logFile.Name())
	defer logFile.Close()
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	if err := caughtUp(ctx, s.slots); err != nil {
		b, _ := os.ReadFile(logFile.Name())
		return res, fmt.Errorf("%w; outboxd's log:\n%s", err, b)
	}
	var a, b, aWal, bWal host.Reading
	var aSrv, bSrv, aSby, bSby float64
	read := func() (host.Reading, host.Reading, float64, float64) {
		_, wal := host.ClusterPIDs(srv.PG.Dir)
		sby := 0.0
		if standbyDir != "" {
			sby = host.ClusterCPU(standbyDir)
		}
		return host.Read([]int{cmd.Process.Pid}, nil), host.Read(nil, wal), host.ClusterCPU(srv.PG.Dir), sby
	}
	res.Result, err = steady.Run(ctx, steady.Load{
		Brokers: srv.Kafka.Addr, Targets: s.targets, Rate: rate, TxSize: o.txSize, Duration: o.duration,
		Started: func() { a, aWal, aSrv, aSby = read() },
		Ended:   func() { b, bWal, bSrv, bSby = read() },
	})
	if err != nil {
		return res, err
	}
	n := float64(res.Written)
	if n == 0 {
		return res, errors.New("nothing written")
	}
	outboxd, _, busy := host.Used(a, b)
	_, wal, _ := host.Used(aWal, bWal)
	res.OutboxdCPUus, res.WalsenderCPUus, res.ServerCPUus, res.MachineBusy = outboxd/n*1e6, wal/n*1e6, (bSrv-aSrv)/n*1e6, busy
	res.StandbyCPUus = (bSby - aSby) / n * 1e6
	return res, nil
}

// caughtUp waits (up to 5 minutes) until every slot is active and has
// confirmed its server's WAL as it was when the wait began.
func caughtUp(ctx context.Context, slots []slotAt) error {
	primary := slots[0].primary
	if primary == "" {
		primary = slots[0].url
	}
	var target string
	if err := servers.QueryRow(ctx, primary, `SELECT pg_current_wal_lsn()::text`, &target); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for _, s := range slots {
		for {
			var ok bool
			err := servers.QueryRow(ctx, s.url, `SELECT coalesce((SELECT active AND confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1), false)`, &ok, s.slot, target)
			if err == nil && ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("slot %s not streaming and caught up with %s within 5 minutes (%v)", s.slot, target, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}
