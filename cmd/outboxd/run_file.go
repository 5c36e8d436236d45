package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/cdc/readpace"
	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/pump"
)

// runFile is `run --config FILE`: every pipeline of the file in this
// process (package fleet), the metrics server beside them, and SIGHUP
// reloading the file, until ctx ends.
func runFile(ctx context.Context, path string, cfg *config.Config, fs *flag.FlagSet, args []string, stderr io.Writer, getenv func(string) string) int {
	build := func() *flag.FlagSet { c := config.Default(); return runFlags(&c, io.Discard) }
	if err := flagsBesideConfig(build, args, config.ProcessFlags()...); err != nil {
		fmt.Fprintf(stderr, "outboxd run: %v\n", err)
		return exitUsage
	}
	file, err := loadPipelinesFile(path, fs, getenv)
	if err != nil {
		return invalidFile(stderr, "run", path, err)
	}
	fc, err := fleetConfig(cfg, os.Hostname)
	if err != nil {
		fmt.Fprintf(stderr, "outboxd run: invalid configuration:\n%v\n", err)
		return exitUsage
	}
	log := cfg.Logger(os.Stderr)
	// The pipelines' read lingers engage from their commits together,
	// and end together (readpace.Shared); their records in flight share
	// one budget.
	shared := processShared{linger: readpace.NewShared(), budget: inFlightBudget(cfg, log), log: log}
	specs, err := fleetSpecs(file, shared)
	if err != nil {
		return invalidFile(stderr, "run", path, err)
	}
	// --max-procs as for one pipeline (1 by default): on two cores the Go
	// runtime hands the pipelines' goroutines between threads, which cost
	// a fleet more wake-ups and CPU per event than the second core gave
	// back (docs/bench/history.md); a process whose pipelines need more
	// than a core sets it higher.
	if cfg.Process.MaxProcs > 0 {
		runtime.GOMAXPROCS(cfg.Process.MaxProcs)
	}
	log.Info("starting", "version", buildVersion(version, readBuildInfo()), "config_file", path, "pipelines", len(specs),
		"replica", fc.Replica, "replicas", fc.Replicas, "max_procs", runtime.GOMAXPROCS(0), "process", config.Dump(processFlags(fs)))
	for _, p := range file.Pipelines {
		log.Info("pipeline", "pipeline", p.Name, "config", config.Dump(p.Flags))
	}
	var mu sync.Mutex
	files := file.SettingFiles()
	run := pipelinesRun{fleet: fc, specs: specs, budget: shared.budget,
		reload: func() ([]fleet.Spec, error) {
			f, err := loadPipelinesFile(path, nil, getenv)
			if err != nil {
				return nil, err
			}
			specs, err := fleetSpecs(f, shared)
			if err == nil {
				mu.Lock()
				files = f.SettingFiles()
				mu.Unlock()
			}
			return specs, err
		},
		settingFiles: func() []string {
			mu.Lock()
			defer mu.Unlock()
			return files
		},
	}
	if err := runPipelines(ctx, run, cfg, log); err != nil {
		log.Error("outboxd run stopped", "err", err)
		return exitError
	}
	return exitOK
}

// processFlags is fs's process settings alone, for the startup dump.
func processFlags(fs *flag.FlagSet) *flag.FlagSet {
	out := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	for _, name := range config.ProcessFlags() {
		if f := fs.Lookup(name); f != nil {
			out.Var(f.Value, f.Name, f.Usage)
		}
	}
	return out
}

// set reports whether the flag name was set (command line, environment
// or a pipelines file's top level).
func set(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// fleetConfig is this replica's part: --replica, or the ordinal of a
// StatefulSet pod (its host name's last "-N") when --replicas is above 1
// and --replica is not given.
func fleetConfig(cfg *config.Config, hostname func() (string, error)) (fleet.Config, error) {
	fc := cfg.Process.Fleet
	fc.Names = cfg.SettingNames().Under("Fleet")
	if fc.Replica < 0 {
		fc.Replica = 0
		if fc.Replicas > 1 {
			host, err := hostname()
			if err != nil {
				return fc, fmt.Errorf("--replica (%s): not given, and the host name is unknown: %w", config.EnvName("replica"), err)
			}
			n, ok := ordinal(host)
			if !ok {
				return fc, fmt.Errorf("--replica (%s): not given, and host name %q does not end in -N (a StatefulSet pod's ordinal)", config.EnvName("replica"), host)
			}
			fc.Replica = n
		}
	}
	if err := fc.Validate(); err != nil {
		return fc, err
	}
	return fc, nil
}

// ordinal is the number after the last "-" of a StatefulSet pod's name.
func ordinal(host string) (int, bool) {
	i := strings.LastIndexByte(host, '-')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(host[i+1:])
	return n, err == nil && n >= 0
}

// processShared is what the pipelines of a process share.
type processShared struct {
	linger *readpace.Shared
	budget *pump.Budget
	log    *slog.Logger
}

// fleetSpecs are the file's pipelines as the fleet runs them, all of
// them lingering together and taking their records in flight from one
// budget. Each owns its Kafka client, so that a pipeline giving up its
// slot can withdraw its records (publish.Producer.Withdraw). A
// pipeline's fingerprint hashes every setting its flags hold (secrets
// too: a rotated password restarts it; the hash never leaves the process).
func fleetSpecs(file config.File, shared processShared) ([]fleet.Spec, error) {
	specs := make([]fleet.Spec, 0, len(file.Pipelines))
	process := config.ProcessFlags()
	for _, p := range file.Pipelines {
		pc, err := p.Config.Pipeline(shared.log)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: %w", p.Name, err)
		}
		pc.Stream.SharedLinger = shared.linger
		pc.Pump.Budget = shared.budget
		h := sha256.New()
		p.Flags.VisitAll(func(f *flag.Flag) {
			// The process's settings are not the pipeline's: a reload
			// reads them from the file alone, the first load from the
			// command line and the environment too.
			if !slices.Contains(process, f.Name) {
				fmt.Fprintf(h, "%s=%q\n", f.Name, f.Value.String())
			}
		})
		specs = append(specs, fleet.Spec{Name: p.Name, Config: pc, Fingerprint: hex.EncodeToString(h.Sum(nil)), Settings: config.SettingsFingerprint(p.Flags)})
	}
	reserveOwnTopics(specs)
	return specs, nil
}

// reserveOwnTopics makes every pipeline's progress and dead-letter topics
// reserved for all of them: a row or message of one pipeline naming
// another's progress topic (with its key) could forge that pipeline's
// exactly-once progress, and one naming another's dead-letter topic could
// pass for a dead letter. Each pipeline reserves its own already.
func reserveOwnTopics(specs []fleet.Spec) {
	var own []string
	for _, s := range specs {
		own = append(own, s.Config.Txn.WithDefaults().ProgressTopic)
		if t := s.Config.Pump.DeadLetterTopic; t != "" {
			own = append(own, t)
		}
	}
	for i := range specs {
		cols := &specs[i].Config.Stream.Columns
		for _, t := range own {
			if !slices.Contains(cols.ReservedTopics, t) {
				cols.ReservedTopics = append(cols.ReservedTopics, t)
			}
		}
	}
}

// pipelinesRun is what runPipelines runs: this replica's part (a fleet
// of one for `run` without a file), the pipelines, their in-flight budget
// and, for a pipelines file, how to read it again (SIGHUP, a setting file
// that changed) and which files the settings now come from.
type pipelinesRun struct {
	fleet        fleet.Config
	specs        []fleet.Spec
	budget       *pump.Budget
	reload       func() ([]fleet.Spec, error) // nil: no file to reload
	settingFiles func() []string
	// pausable: SIGUSR1 pauses the one pipeline and SIGUSR2 resumes it
	// (a run without a pipelines file).
	pausable bool
}

// runPipelines runs the fleet and the metrics server until ctx ends (or,
// for a fleet of one, its pipeline fails). With a file to reload, SIGHUP
// or a change in a file the settings come from (a secret rotated in place,
// read every settingFilesPoll) reloads it and applies what it returns (or
// logs why not, changing nothing); the outcome is exported
// (outboxd_config_last_reload_successful).
func runPipelines(ctx context.Context, run pipelinesRun, cfg *config.Config, log *slog.Logger) error {
	reg := ops.NewRegistry()
	limits := run.budget.Stats()
	if err := errors.Join(ops.RegisterBudget(reg, limits.MaxRecords, limits.MaxBytes), registerBuildInfo(reg)); err != nil {
		return err
	}
	var mu sync.Mutex
	metrics := map[*fleet.Member]*ops.Metrics{}
	hooks := fleet.Hooks{
		Added: func(m *fleet.Member) {
			om, err := ops.NewMetrics(reg, m.Name(), m, fleet.States())
			if err != nil { // names are unique, and a removed one unregistered first
				log.Error("registering the pipeline's metrics; it runs without them", "pipeline", m.Name(), "err", err)
				return
			}
			m.Observe(om)
			mu.Lock()
			metrics[m] = om
			mu.Unlock()
		},
		Removed: func(m *fleet.Member) {
			mu.Lock()
			om := metrics[m]
			delete(metrics, m)
			mu.Unlock()
			if om != nil {
				om.Unregister()
			}
		},
	}
	f, err := fleet.New(run.fleet, run.specs, hooks, log)
	if err != nil {
		return err
	}
	if !run.fleet.Single {
		if err := ops.RegisterUnrun(reg, func() (int, int64) { u := f.Unrun(); return len(u.Slots), u.Retained }); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	// The metrics server outlives the pipelines' drain, so that probes
	// and scrapes see it: /readyz says "stopping" meanwhile.
	srvCtx, stopServer := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServer()
	if cfg.Process.MetricsAddr != "" {
		list := func() []ops.Named {
			var out []ops.Named
			for _, m := range f.Members() {
				out = append(out, ops.Named{Name: m.Name(), Status: m.Status()})
			}
			return out
		}
		srv := &ops.Server{Addr: cfg.Process.MetricsAddr, Registry: reg, Pipelines: list, Log: log, Pprof: cfg.Process.Pprof, Stopping: gctx.Done()}
		if _, err := srv.Listen(); err != nil {
			return err
		}
		g.Go(func() error { return srv.Run(srvCtx) })
	}
	if run.reload != nil {
		if err := reloadOnSignal(gctx, g, f, reg, run, log); err != nil {
			return err
		}
	}
	if run.pausable {
		pauseOnSignal(gctx, g, f, run.specs[0], log)
	}
	g.Go(func() error {
		defer stopServer()
		return f.Run(gctx)
	})
	return g.Wait()
}

// reloadOnSignal reloads the pipelines file on SIGHUP and when a file the
// settings come from changes, in g until ctx ends, exporting the outcome
// on reg.
func reloadOnSignal(ctx context.Context, g *errgroup.Group, f *fleet.Fleet, reg prometheus.Registerer, run pipelinesRun, log *slog.Logger) error {
	reloaded := ops.NewReloads(time.Now())
	if err := reg.Register(reloaded); err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	changed := make(chan []string, 1)
	g.Go(func() error { watchFiles(ctx, run.settingFiles, settingFilesPoll, changed); return nil })
	g.Go(func() error {
		defer signal.Ignore(syscall.SIGHUP) // as before run: SIGHUP is no reason to die
		for {
			why := "on SIGHUP"
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
			case files := <-changed:
				why = "as a file a pipeline's settings come from changed"
				log.Info("a file a pipeline's settings come from changed (a secret rotated?): reloading the pipelines file, which restarts the pipelines whose settings changed", "files", files)
			}
			specs, err := run.reload()
			if err == nil {
				err = f.Reload(specs)
			}
			reloaded.Set(err == nil, time.Now())
			if err != nil {
				log.Error("reloading the pipelines file "+why+": nothing changed (outboxd_config_last_reload_successful is 0; the next start would refuse the file)", "err", err)
			}
		}
	})
	return nil
}
