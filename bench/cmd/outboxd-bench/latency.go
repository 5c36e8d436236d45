package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/bench/internal/cmdline"
	"github.com/outboxd/outboxd/bench/internal/host"
	"github.com/outboxd/outboxd/bench/internal/servers"
	"github.com/outboxd/outboxd/bench/internal/stats"
	"github.com/outboxd/outboxd/bench/internal/steady"
	"github.com/outboxd/outboxd/bench/relay"
)

// latencyResult is one steady-rate run: commit (as the writer saw it) to
// receipt by a consumer.
type latencyResult struct {
	System      string  `json:"system"`
	Rep         int     `json:"rep"`
	TargetRate  int     `json:"target_events_per_second"`
	WrittenRate float64 `json:"written_events_per_second"`
	Written     int     `json:"written"`
	Delivered   int     `json:"delivered"`
	P50ms       float64 `json:"p50_ms"`
	P95ms       float64 `json:"p95_ms"`
	P99ms       float64 `json:"p99_ms"`
	Maxms       float64 `json:"max_ms"`
	// Reached: the writers wrote at least 95% of the target rate. On a
	// small machine they may not, whatever the system under test.
	Reached bool `json:"rate_reached"`
	// Sustained: every event delivered and p99 under a second.
	Sustained bool `json:"sustained"`
	// CPU per event written, from the first write until the last event
	// arrived (see cpuProbe): the publisher's own process, and the
	// PostgreSQL processes working for it (walsender, or the relay's
	// backends); MachineBusy is the share of all cores busy meanwhile.
	PublisherCPUus float64 `json:"publisher_cpu_us_per_event"`
	// PublisherWakeups is how often the publisher's threads woke up per
	// transaction written (-transaction-size events; see procstat.Sleeps): most of the
	// steady CPU is the cost of wake-ups, not of the events.
	PublisherWakeups float64 `json:"publisher_wakeups_per_transaction,omitempty"`
	ServerCPUus      float64 `json:"server_cpu_us_per_event"`
	MachineBusy      float64 `json:"machine_cpu_busy"`
	// Profile is set instead of the figures on the unmeasured profiled
	// run of outboxd at this rate (go tool pprof -top).
	Profile string `json:"profile_top,omitempty"`
	// Stages is where outboxd's latency arose in this run, from its own
	// histograms (outboxd only).
	Stages []stageLatency `json:"stages,omitempty"`
}

// latencySummary is one system at one rate over the repetitions: the run
// with the median p99, and the spread of p99 over all runs.
type latencySummary struct {
	latencyResult
	Runs     int     `json:"runs"`
	P99MinMs float64 `json:"p99_min_ms"`
	P99MaxMs float64 `json:"p99_max_ms"`
	// Medians and spreads of the CPU per event over all runs (the
	// embedded run's own figures are those of the median-p99 run).
	PublisherCPUMedianUs   float64 `json:"publisher_cpu_us_per_event_median"`
	PublisherCPUMinUs      float64 `json:"publisher_cpu_us_per_event_min"`
	PublisherCPUMaxUs      float64 `json:"publisher_cpu_us_per_event_max"`
	PublisherWakeupsMedian float64 `json:"publisher_wakeups_per_transaction_median,omitempty"`
	ServerCPUMedianUs      float64 `json:"server_cpu_us_per_event_median"`
}

// summarizeLatency groups the runs by system and rate, in first-seen order.
func summarizeLatency(runs []latencyResult) []latencySummary {
	type key struct {
		sys  string
		rate int
	}
	var order []key
	groups := map[key][]latencyResult{}
	for _, r := range runs {
		if r.Profile != "" {
			continue
		}
		k := key{r.System, r.TargetRate}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []latencySummary
	for _, k := range order {
		g := slices.Clone(groups[k])
		slices.SortFunc(g, func(a, b latencyResult) int { return cmpFloat(a.P99ms, b.P99ms) })
		pub := make([]float64, len(g))
		srv := make([]float64, len(g))
		wake := make([]float64, len(g))
		for i, r := range g {
			pub[i], srv[i], wake[i] = r.PublisherCPUus, r.ServerCPUus, r.PublisherWakeups
		}
		slices.Sort(pub)
		slices.Sort(srv)
		slices.Sort(wake)
		out = append(out, latencySummary{latencyResult: g[len(g)/2], Runs: len(g), P99MinMs: g[0].P99ms, P99MaxMs: g[len(g)-1].P99ms,
			PublisherCPUMedianUs: stats.Median(pub), PublisherCPUMinUs: pub[0], PublisherCPUMaxUs: pub[len(pub)-1], ServerCPUMedianUs: stats.Median(srv),
			PublisherWakeupsMedian: stats.Median(wake)})
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// steadySystem is a system set up for steady-rate runs: its database,
// topic and process, warmed up.
type steadySystem struct {
	sys, db, topic string
	insert         string // one transaction's statement (-transaction-size rows); $1 is the topic
	probe          cpuProbe
	pprofAddr      string // outboxd's --metrics-addr, for profiling steady runs
	metricsAddr    string // outboxd's --metrics-addr, for its stage histograms
	stop           func()
}

// latency runs each of systems against an empty outbox of its own and
// writes at each rate, -latency-reps times. Systems given together are
// started together and their runs interleaved (each repetition of each
// rate runs every system in turn): the machine's drift over a run then
// falls on all of them alike, which a before/after of two builds needs.
func (e *env) latency(ctx context.Context, systems ...string) ([]latencyResult, error) {
	rates, err := parseRates(e.o.rates)
	if err != nil {
		return nil, err
	}
	var started []*steadySystem
	defer func() {
		for _, s := range started {
			s.stop()
			e.dropDatabase(context.WithoutCancel(ctx), s.db)
		}
	}()
	for _, sys := range systems {
		s, err := e.startSteady(ctx, sys, rates[0])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sys, err)
		}
		started = append(started, s)
	}
	var out []latencyResult
	for _, s := range started {
		if s.pprofAddr == "" || !e.o.steadyProfile {
			continue
		}
		// One profiled, unmeasured run per rate: where steady-rate CPU goes
		// (a drain's profile says little about it).
		for _, rate := range rates {
			file := filepath.Join(e.o.out, fmt.Sprintf("outboxd-steady-%d.pprof", rate))
			profc := make(chan error, 1)
			go func() { profc <- cpuProfile(s.pprofAddr, e.o.rateDuration-time.Second, file) }()
			if _, err := e.steady(ctx, s, rate, e.o.rateDuration); err != nil {
				return out, fmt.Errorf("%s: profiled run at %d events/s: %w", s.sys, rate, err)
			}
			if err := <-profc; err != nil {
				e.log.Warn("steady profile", "rate", rate, "err", err)
				continue
			}
			out = append(out, latencyResult{System: s.sys, TargetRate: rate, Profile: pprofTop(file)})
		}
	}
	for rep := range e.o.latencyReps {
		for _, rate := range rates {
			for _, s := range started {
				res, err := e.steady(ctx, s, rate, e.o.rateDuration)
				if err != nil {
					return out, fmt.Errorf("%s: %w", s.sys, err)
				}
				res.System, res.Rep = s.sys, rep+1
				out = append(out, res)
				e.log.Info("latency", "system", s.sys, "rep", rep+1, "rate", rate, "written_per_s", int(res.WrittenRate), "p50_ms", res.P50ms, "p99_ms", res.P99ms, "sustained", res.Sustained,
					"publisher_cpu_us_per_event", fmt.Sprintf("%.1f", res.PublisherCPUus), "publisher_wakeups_per_transaction", fmt.Sprintf("%.2f", res.PublisherWakeups), "server_cpu_us_per_event", fmt.Sprintf("%.1f", res.ServerCPUus))
			}
		}
	}
	return out, nil
}

// startSteady sets sys up against an empty outbox, starts it and warms it
// up at warmRate (unmeasured: connections, the JIT of the JVM systems,
// caches).
func (e *env) startSteady(ctx context.Context, sys string, warmRate int) (_ *steadySystem, err error) {
	s := &steadySystem{sys: sys, db: "bench_latency_" + strings.ReplaceAll(sys, "-", "_"), topic: "bench.latency." + sys, stop: func() {}}
	if err := e.Exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+s.db+" WITH (FORCE)", "CREATE DATABASE "+s.db); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.stop()
			e.dropDatabase(context.WithoutCancel(ctx), s.db)
		}
	}()
	if err := e.CreateTopics(ctx, s.topic); err != nil {
		return nil, err
	}
	slot := s.db
	s.probe = cpuProbe{db: s.db, slot: slot}
	switch {
	case isOutboxd(sys):
		if err := e.migrate(ctx, s.db); err != nil {
			return nil, err
		}
		// run never creates a slot on its own (it would publish nothing
		// committed before); the drain creates its slot the same way.
		if err := e.Exec(ctx, s.db, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, slot)); err != nil {
			return nil, err
		}
		s.insert = steady.OutboxInsert(e.o.txSize)
		addr, err := servers.FreeAddr()
		if err != nil {
			return nil, err
		}
		if sys == "outboxd" {
			s.pprofAddr = addr
		}
		s.metricsAddr = addr
		cmd := exec.Command(e.outboxdBinary(sys), append([]string{"run", "--database-url", e.DatabaseURL(s.db), "--brokers", e.Kafka.Addr, "--slot", slot, "--log-level", "warn",
			"--metrics-addr", addr, "--pprof"}, e.outboxdArgs(sys)...)...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s.probe.pid = cmd.Process.Pid
		s.stop = func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }
	case sys == "relay":
		if err := e.Exec(ctx, s.db, relay.Schema); err != nil {
			return nil, err
		}
		s.insert = fmt.Sprintf(`INSERT INTO outbox_relay (aggregate_id, topic, payload) SELECT md5(g::text)::uuid, $1, jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, %d) g RETURNING id::text`, e.o.txSize)
		cmd := exec.Command(e.o.relay, "--database-url", e.DatabaseURL(s.db)+"&application_name="+relayAppName, "--brokers", e.Kafka.Addr, "--workers", "4", "--batch", "500", "--poll-interval", "100ms")
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s.probe.pid, s.probe.slot = cmd.Process.Pid, ""
		s.stop = func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }
	case sys == "debezium" || sys == "debezium-eos":
		if err := e.SetUpDebezium(ctx, e.o.debezium, s.db, slot); err != nil {
			return nil, err
		}
		prefix := s.topic
		s.insert, s.topic = steady.DebeziumInsert(e.o.txSize), steady.DebeziumTopic(prefix)
		pid, work, stop, err := e.startDebezium(ctx, s.db, slot, prefix, "latency", sys == "debezium-eos")
		if err != nil {
			return nil, err
		}
		s.probe.pid, s.stop = pid, stop
		if out, err := exec.CommandContext(ctx, e.o.debezium, "wait", work).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("waiting for the connector: %w\n%s", err, out)
		}
	default:
		return nil, fmt.Errorf("no latency run for %s", sys)
	}
	time.Sleep(time.Second)
	if _, err := e.steady(ctx, s, warmRate, 5*time.Second); err != nil {
		return nil, fmt.Errorf("warming up: %w", err)
	}
	return s, nil
}

func parseRates(s string) ([]int, error) { return cmdline.PositiveInts("rates", s) }

// steady writes rate events/s (-transaction-size rows a statement, from 4
// writers) for d while a consumer notes when each id arrives
// (package steady), and reads what the system's processes used meanwhile.
func (e *env) steady(ctx context.Context, s *steadySystem, rate int, d time.Duration) (latencyResult, error) {
	res := latencyResult{TargetRate: rate}
	var stagesBefore histSnapshot
	var cpuBefore, cpuAfter host.Reading
	r, err := steady.Run(ctx, steady.Load{
		Brokers: e.Kafka.Addr, Targets: []steady.Target{{URL: e.DatabaseURL(s.db), Topic: s.topic, Insert: s.insert, Writers: 4}},
		Rate: rate, TxSize: e.o.txSize, Duration: d,
		Started: func() {
			if s.metricsAddr != "" {
				stagesBefore, _ = scrapeStages(s.metricsAddr) // nil: the stages are left out
			}
			cpuBefore = s.probe.read(ctx, e)
		},
		Ended: func() {
			cpuAfter = s.probe.read(ctx, e)
			if stagesBefore != nil {
				if after, err := scrapeStages(s.metricsAddr); err == nil {
					res.Stages = stagesBetween(stagesBefore, after)
				}
			}
		},
	})
	if err != nil {
		return res, err
	}
	res.Written, res.Delivered, res.WrittenRate = r.Written, r.Delivered, r.WrittenRate
	res.P50ms, res.P95ms, res.P99ms, res.Maxms = r.P50ms, r.P95ms, r.P99ms, r.Maxms
	if r.Written > 0 {
		pub, srv, busy := host.Used(cpuBefore, cpuAfter)
		res.PublisherCPUus, res.ServerCPUus, res.MachineBusy = pub/float64(r.Written)*1e6, srv/float64(r.Written)*1e6, busy
		res.PublisherWakeups = float64(cpuAfter.Sleeps-cpuBefore.Sleeps) / (float64(r.Written) / float64(e.o.txSize))
	}
	res.Reached, res.Sustained = r.Reached(rate), r.Sustained()
	return res, nil
}
