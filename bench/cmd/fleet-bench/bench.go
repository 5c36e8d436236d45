package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/bench/internal/host"
	"github.com/outboxd/outboxd/bench/internal/servers"
)

// kafkaWarmUp is how many records warm the broker up before anything is
// timed, as outboxd-bench does.
const kafkaWarmUp = 1_000_000

// run starts the servers, sets the pipelines up, measures every step of
// every repetition and writes the report. A step that fails is reported
// and the run goes on; a cancelled run stops every outboxd it started,
// removes the servers and writes nothing.
func run(ctx context.Context, o options, log *slog.Logger) error {
	start := time.Now()
	srv, err := servers.Start(ctx, o.testbed)
	if err != nil {
		return err
	}
	defer srv.Remove(context.WithoutCancel(ctx)) //nolint:errcheck // the run's outcome is decided
	b := &bench{Servers: srv, o: o, log: log, fleet: fleetPipelines("p", o.pipelines, o.txSize), ref: newPipeline("single", o.txSize)}
	if o.debezium != "" {
		b.peers = fleetPipelines("d", o.peers, o.txSize)
		for _, p := range b.peers {
			b.dbz = append(b.dbz, debeziumPipeline(p, o.txSize))
		}
	}
	// A slot each for the fleet, C and D; the reference's is in the
	// headroom.
	limits := serverLimits(len(b.fleet) + len(b.peers) + len(b.dbz))
	if err := srv.Restart(ctx, limits...); err != nil {
		return fmt.Errorf("raising PostgreSQL's limits for %d pipelines: %w", o.pipelines, err)
	}
	if err := srv.WarmKafka(ctx, kafkaWarmUp, 0); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "fleet-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	setUpStart := time.Now()
	if err := b.setUp(ctx, dir); err != nil {
		return fmt.Errorf("setting %d pipelines up: %w", o.pipelines, err)
	}
	log.Info("pipelines set up", "pipelines", o.pipelines, "seconds", int(time.Since(setUpStart).Seconds()))
	res := Results{Date: time.Now().UTC().Format(time.RFC3339), Args: o.args, Machine: host.Describe(), Settings: b.settings(ctx, limits), Errors: map[string]string{}}
	res.Settings["setup_seconds"] = fmt.Sprintf("%.0f", time.Since(setUpStart).Seconds())
	for rep := 1; rep <= o.reps; rep++ {
		for _, step := range stepOrder(rep, o.debezium != "", o.slotReader != "", !o.noProcesses) {
			if err := b.measure(ctx, step, rep, &res); err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("interrupted in step %s of repetition %d: %w", step, rep, ctx.Err())
				}
				log.Error("step failed", "step", step, "rep", rep, "err", err)
				res.Errors[fmt.Sprintf("%s, rep %d", step, rep)] = err.Error()
			}
		}
	}
	res.Settings["total_seconds"] = fmt.Sprintf("%.0f", time.Since(start).Seconds())
	return write(o.out, res)
}

// stepOrder is a repetition's steps: A, then the single pipeline (the
// load's reference, next to A's load), then (withFloor) F1 and F, the
// floor under both, then (withProcesses) B, then (withDebezium) C and D;
// every other repetition the other way round, so that the machine's drift
// over the run falls on A and B, and on C and D, alike.
func stepOrder(rep int, withDebezium, withFloor, withProcesses bool) []string {
	steps := []string{"A", "single"}
	if withFloor {
		steps = append(steps, "F1", "F")
	}
	if withProcesses {
		steps = append(steps, "B")
	}
	if withDebezium {
		steps = append(steps, "C", "D")
	}
	if rep%2 == 0 {
		slices.Reverse(steps)
	}
	return steps
}

// measure runs one step: A's launch, idle window and steady load; the
// single pipeline's load; B's launch and idle window. Each starts its
// processes and stops them, and waits until their slots are released.
func (b *bench) measure(ctx context.Context, step string, rep int, res *Results) (err error) {
	ps, launch := b.fleet, b.launchA
	switch step {
	case "B":
		launch = b.launchB
	case "single":
		ps, launch = []pipeline{b.ref}, b.launchReference
	case "C":
		ps = b.peers
	case "D":
		ps = b.dbz
	case "F1":
		ps = []pipeline{b.ref}
	}
	advanced := time.Now()
	if err := b.advance(ctx, ps); err != nil {
		return err
	}
	backlog, err := b.restartBacklog(ctx, slotsOf(ps))
	if err != nil {
		return err
	}
	b.log.Info("step", "step", step, "rep", rep, "slots_advanced_in_s", fmt.Sprintf("%.1f", time.Since(advanced).Seconds()), "restart_backlog_mib", backlog>>20)
	switch step {
	case "C", "D", "F", "F1":
		return b.measureSteady(ctx, step, rep, res)
	}
	g, err := launch()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, g.stop(), b.released(ctx, g)) }()
	if step == "single" {
		if _, err := awaitStreaming(ctx, g); err != nil {
			return err
		}
		if _, err := b.caughtUp(ctx, g); err != nil {
			return err
		}
	} else {
		ir, err := b.idle(ctx, g, rep)
		if err != nil {
			return err
		}
		res.Idle = append(res.Idle, ir)
		b.log.Info("idle", "mode", step, "rep", rep, "processes", ir.Processes, "streaming_s", fmt.Sprintf("%.2f", ir.StreamingSeconds), "caught_up_s", fmt.Sprintf("%.2f", ir.CaughtUpSeconds),
			"peak_rss_mib", ir.PeakRSSBytes>>20, "idle_cpu_percent_of_a_core", fmt.Sprintf("%.2f", ir.IdleCorePercent()),
			"walsender_idle_cpu_percent_of_a_core", fmt.Sprintf("%.2f", 100*ir.IdleWalsenderCPUSeconds/ir.IdleSeconds))
		if step == "B" {
			return nil
		}
	}
	lr, err := b.load(ctx, g, rep, b.o.rate)
	if err != nil {
		return err
	}
	res.Load = append(res.Load, b.logLoad(lr))
	return nil
}

// measureSteady runs step C, D, F or F1: its launch, until every slot
// streams and its walsender caught up, then its steady load: C's and D's
// of -debezium-rate, F's and F1's of -rate, A's and the single
// pipeline's. The step's slots were advanced.
func (b *bench) measureSteady(ctx context.Context, step string, rep int, res *Results) (err error) {
	dir, err := os.MkdirTemp("", "fleet-bench-"+step+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var g *group
	var work string
	rate := b.o.peerRate
	switch step {
	case "C":
		g, err = b.launchC()
	case "D":
		g, work, err = b.launchD(dir)
	default:
		g, err = b.launchFloor(step)
		rate = b.o.rate
	}
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, g.stop(), b.released(ctx, g)) }()
	// slot-reader reports no state: caughtUp alone waits for each of its
	// slots to be streamed.
	switch step {
	case "C":
		_, err = awaitStreaming(ctx, g)
	case "D":
		err = b.awaitConnectors(ctx, g, work)
	}
	if err != nil {
		return err
	}
	at, err := b.caughtUp(ctx, g)
	if err != nil {
		return err
	}
	lr, err := b.load(ctx, g, rep, rate)
	if err != nil {
		return err
	}
	if !g.reader {
		lr.CaughtUpSeconds = at.Sub(g.launched).Seconds()
	}
	res.Load = append(res.Load, b.logLoad(lr))
	return nil
}

// logLoad logs a measured load and returns it.
func (b *bench) logLoad(lr loadRun) loadRun {
	b.log.Info("load", "system", lr.System, "rep", lr.Rep, "written_per_s", int(lr.WrittenRate), "p50_ms", lr.P50ms, "p99_ms", lr.P99ms, "sustained", lr.Sustained,
		"publisher_cpu_us_per_event", fmt.Sprintf("%.1f", lr.PublisherCPUus), "walsender_cpu_us_per_event", fmt.Sprintf("%.1f", lr.ServerCPUus),
		"peak_rss_mib", lr.PeakRSSBytes>>20)
	return lr
}

// settings are the run's settings as the report states them.
func (b *bench) settings(ctx context.Context, limits []string) map[string]string {
	version, err := exec.CommandContext(ctx, b.o.outboxd, "version").Output()
	if err != nil {
		version = []byte(err.Error())
	}
	s := map[string]string{
		"pipelines": strconv.Itoa(b.o.pipelines), "reps": strconv.Itoa(b.o.reps), "idle": b.o.idle.String(),
		"rate": strconv.Itoa(b.o.rate), "rate_duration": b.o.rateDuration.String(), "transaction_size": strconv.Itoa(b.o.txSize),
		"warm_up": warmUp.String() + " at the rate",
		"writers": fmt.Sprintf("A: %d connection(s) a database; single: %d", writers(b.o.pipelines), writers(1)),
		"postgres": fmt.Sprintf("%s, the test bed's, with fsync=on, full_page_writes=on, synchronous_commit=on, and for this run %s",
			b.serverVersion(ctx), strings.Join(limits, ", ")),
		"kafka":   fmt.Sprintf("4.1.1 single node KRaft (the test bed's), warmed up with %d records; a topic a pipeline, %d partitions", kafkaWarmUp, servers.Partitions),
		"outboxd": strings.Join(strings.Fields(string(version)), " "),
		"pipeline_settings": "brokers, log-level warn, and each pipeline's database-url and slot: the top level and entries of A's file, " +
			"flags of each B process and of the single pipeline; everything else run's defaults",
		"max_procs": "1 for every process: outboxd's by run's --max-procs default, with or without --config; slot-reader's (F, F1) by GOMAXPROCS=1",
		"order": "each repetition: " + strings.Join(stepOrder(1, b.o.debezium != "", b.o.slotReader != "", !b.o.noProcesses), ", ") +
			"; every other one: " + strings.Join(stepOrder(2, b.o.debezium != "", b.o.slotReader != "", !b.o.noProcesses), ", "),
	}
	if b.o.debezium != "" {
		s["debezium_pipelines"], s["debezium_rate"] = strconv.Itoa(b.o.peers), strconv.Itoa(b.o.peerRate)
		s["debezium"] = debeziumVersions(b.o.debezium)
	}
	return s
}

func (b *bench) serverVersion(ctx context.Context) string {
	var v string
	if err := b.queryRow(ctx, "SHOW server_version", nil, &v); err != nil {
		return "PostgreSQL (version unknown: " + err.Error() + ")"
	}
	return "PostgreSQL " + v
}
