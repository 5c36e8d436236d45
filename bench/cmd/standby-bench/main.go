// Command standby-bench measures what decoding on a standby (issue 52)
// takes off the primary: outboxd with its slot on the primary beside
// outboxd with its slot on a physical standby of it (--primary-url), at
// steady write rates, in one run on the same servers, the two arms
// interleaved repetition by repetition. For each run it reads the CPU
// time of every process of the primary (its writers' backends, its
// walsenders, its background processes), of the standby and of outboxd,
// and the latency of every event from its commit (as the writer saw it)
// to its receipt by a Kafka consumer. It writes results.json and
// README.md into -out.
//
//	make bench-standby    (PostgreSQL 17 unless PG_VERSION says otherwise; not part of make test)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/bench/internal/cmdline"
	"github.com/outboxd/outboxd/bench/internal/host"
	"github.com/outboxd/outboxd/bench/internal/servers"
	"github.com/outboxd/outboxd/bench/internal/steady"
	"github.com/outboxd/outboxd/harness/testbed"
)

type options struct {
	outboxd, testbed, out string
	rates                 []int
	reps, txSize          int
	duration              time.Duration
}

func main() {
	var o options
	rates := flag.String("rates", "1000,5000,10000", "steady write rates, events/s")
	flag.StringVar(&o.outboxd, "outboxd", "bin/outboxd", "outboxd binary")
	flag.StringVar(&o.testbed, "testbed", "harness/testbed/testbed.sh", "test bed script")
	flag.StringVar(&o.out, "out", "docs/bench/standby", "output directory")
	flag.IntVar(&o.reps, "reps", 5, "repetitions of each rate and arm (medians and spreads are reported)")
	flag.IntVar(&o.txSize, "transaction-size", 10, "events per transaction")
	flag.DurationVar(&o.duration, "rate-duration", 10*time.Second, "how long each steady rate is written")
	flag.Parse()
	var err error
	if o.rates, err = cmdline.PositiveInts("rates", *rates); err != nil {
		fmt.Fprintln(os.Stderr, "standby-bench:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, "standby-bench:", err)
		os.Exit(1)
	}
}

// Arms: where the slot is.
const (
	armPrimary = "primary"
	armStandby = "standby"
)

// result is one steady run of one arm.
type result struct {
	Arm  string `json:"arm"`
	Rate int    `json:"target_events_per_second"`
	Rep  int    `json:"rep"`
	steady.Result
	// CPU per event written, from the first write until the last event
	// arrived: every process of the primary, its walsenders among them
	// (outboxd's and the standby's physical one), every process of the
	// standby, and outboxd.
	PrimaryCPUus          float64 `json:"primary_cpu_us_per_event"`
	PrimaryWalsenderCPUus float64 `json:"primary_walsender_cpu_us_per_event"`
	StandbyCPUus          float64 `json:"standby_cpu_us_per_event"`
	OutboxdCPUus          float64 `json:"outboxd_cpu_us_per_event"`
	MachineBusy           float64 `json:"machine_cpu_busy"`
}

type report struct {
	When      time.Time         `json:"when"`
	Command   string            `json:"command"`
	Host      map[string]string `json:"host"`
	PGVersion string            `json:"postgres_version"`
	TxSize    int               `json:"transaction_size"`
	DurationS float64           `json:"rate_duration_seconds"`
	Runs      []result          `json:"runs"`
	Summary   []summary         `json:"summary"`
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	srv, err := servers.Start(ctx, o.testbed)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Remove(context.WithoutCancel(ctx)) }()
	standby, err := srv.PG.StartStandby(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("starting the standby: %w", err)
	}
	defer func() { _ = standby.Remove(context.WithoutCancel(ctx)) }()
	if err := srv.Exec(ctx, "postgres", "CREATE DATABASE app"); err != nil {
		return err
	}
	primaryApp, standbyApp := srv.DatabaseURL("app"), servers.OnDatabase(standby.URL, "app")
	// The schema, and no slot: each run creates its own (run
	// --create-slot) and drops it after, so that no idle slot retains WAL
	// across the runs.
	if out, err := exec.CommandContext(ctx, o.outboxd, "migrate", "--database-url", primaryApp, "--create-slot=false").CombinedOutput(); err != nil {
		return fmt.Errorf("outboxd migrate: %w\n%s", err, out)
	}
	var version string
	if err := servers.QueryRow(ctx, primaryApp, `SELECT current_setting('server_version')`, &version); err != nil {
		return err
	}
	rep := report{When: time.Now().UTC(), Command: cmdline.Join(append([]string{"standby-bench"}, os.Args[1:]...)), Host: host.Describe(),
		PGVersion: version, TxSize: o.txSize, DurationS: o.duration.Seconds()}
	// Unmeasured first runs of each arm: the first steady run on fresh
	// servers pays for their warm-up.
	for _, arm := range []string{armPrimary, armStandby} {
		w := o
		w.duration = 3 * time.Second
		if _, err := oneRun(ctx, w, srv, standby, primaryApp, standbyApp, arm, o.rates[0], 0, log); err != nil {
			return fmt.Errorf("warming up %s: %w", arm, err)
		}
	}
	for _, rate := range o.rates {
		for i := range o.reps {
			arms := []string{armPrimary, armStandby}
			if i%2 == 1 {
				arms = []string{armStandby, armPrimary}
			}
			for _, arm := range arms {
				r, err := oneRun(ctx, o, srv, standby, primaryApp, standbyApp, arm, rate, i+1, log)
				if err != nil {
					return fmt.Errorf("%s at %d events/s, repetition %d: %w", arm, rate, i+1, err)
				}
				log.Info("run", "arm", arm, "rate", rate, "rep", i+1, "p99_ms", r.P99ms, "primary_cpu_us_per_event", r.PrimaryCPUus,
					"primary_walsender_us_per_event", r.PrimaryWalsenderCPUus, "standby_cpu_us_per_event", r.StandbyCPUus, "outboxd_cpu_us_per_event", r.OutboxdCPUus,
					"written", r.Written, "delivered", r.Delivered)
				rep.Runs = append(rep.Runs, r)
			}
		}
	}
	rep.Summary = summarize(rep.Runs, o.rates)
	return write(o.out, rep)
}

// oneRun runs outboxd with a new slot on the arm's server, writes at rate
// for the duration, and reads what it cost.
func oneRun(ctx context.Context, o options, srv *servers.Servers, standby *testbed.Postgres, primaryApp, standbyApp, arm string, rate, repN int, log *slog.Logger) (result, error) {
	res := result{Arm: arm, Rate: rate, Rep: repN}
	slotName := fmt.Sprintf("bench_%s_%d_%d", arm, rate, repN)
	topic := "standby-bench." + slotName
	if err := srv.CreateTopics(ctx, topic); err != nil {
		return res, err
	}
	slotURL := primaryApp
	args := []string{"run", "--slot", slotName, "--create-slot", "--brokers", srv.Kafka.Addr}
	if arm == armStandby {
		slotURL = standbyApp
		args = append(args, "--primary-url", primaryApp)
	}
	args = append(args, "--database-url", slotURL)
	cmd := exec.CommandContext(ctx, o.outboxd, args...)
	logFile, err := os.CreateTemp("", "standby-bench-outboxd-*.log")
	if err != nil {
		return res, err
	}
	defer os.Remove(logFile.Name())
	defer logFile.Close()
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return res, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	if err := waitActive(ctx, slotURL, slotName); err != nil {
		b, _ := os.ReadFile(logFile.Name())
		return res, fmt.Errorf("%w; outboxd's log:\n%s", err, b)
	}
	var a, b, aWal, bWal host.Reading
	var aPrim, bPrim, aStby, bStby float64
	read := func() (host.Reading, host.Reading, float64, float64) {
		_, wal := host.ClusterPIDs(srv.PG.Dir)
		return host.Read([]int{cmd.Process.Pid}, nil), host.Read(nil, wal), host.ClusterCPU(srv.PG.Dir), host.ClusterCPU(standby.Dir)
	}
	res.Result, err = steady.Run(ctx, steady.Load{
		Brokers: srv.Kafka.Addr,
		Targets: []steady.Target{{URL: primaryApp, Topic: topic, Insert: steady.OutboxInsert(o.txSize), Writers: 2}},
		Rate:    rate, TxSize: o.txSize, Duration: o.duration,
		Started: func() { a, aWal, aPrim, aStby = read() },
		Ended:   func() { b, bWal, bPrim, bStby = read() },
	})
	if err != nil {
		return res, err
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	werr := cmd.Wait()
	stopped = true
	if werr != nil {
		log.Warn("outboxd did not stop cleanly", "arm", arm, "err", werr)
	}
	if err := dropSlot(ctx, slotURL, slotName); err != nil {
		return res, err
	}
	n := float64(res.Written)
	if n == 0 {
		return res, errors.New("nothing written")
	}
	outboxd, _, busy := host.Used(a, b)
	_, wal, _ := host.Used(aWal, bWal)
	prim, stby := bPrim-aPrim, bStby-aStby
	res.OutboxdCPUus, res.StandbyCPUus, res.PrimaryCPUus, res.PrimaryWalsenderCPUus = outboxd/n*1e6, stby/n*1e6, prim/n*1e6, wal/n*1e6
	res.MachineBusy = busy
	return res, nil
}

func waitActive(ctx context.Context, dbURL, slotName string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var active bool
		if err := servers.QueryRow(ctx, dbURL, `SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false)`, &active, slotName); err == nil && active {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("slot %s not streaming within a minute", slotName)
}

func dropSlot(ctx context.Context, dbURL, slotName string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var dropped bool
		err := servers.QueryRow(ctx, dbURL, `SELECT count(pg_drop_replication_slot(slot_name)) >= 0 FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, &dropped, slotName)
		var gone bool
		if err == nil {
			err = servers.QueryRow(ctx, dbURL, `SELECT NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, &gone, slotName)
		}
		if err == nil && gone {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dropping slot %s: %v", slotName, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
