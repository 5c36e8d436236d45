package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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

	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/cdc/readpace"
	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/publish"
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
	// At-least-once pipelines with the same Kafka settings publish
	// through one client (publish.Pool), for the life of the process.
	clients := publish.NewPool(log)
	// The pipelines' read lingers engage from their commits together,
	// and end together (readpace.Shared).
	linger := readpace.NewShared()
	specs, err := fleetSpecs(file, clients, linger)
	if err != nil {
		return invalidFile(stderr, "run", path, err)
	}
	// --max-procs as for one pipeline (1 by default): on two cores the Go
	// runtime hands the pipelines' goroutines between threads, which cost
	// a fleet more wake-ups and CPU per event than the second core gave
	// back (docs/bench/history.md); a process whose pipelines need more
	// than a core sets it higher.
	if cfg.MaxProcs > 0 {
		runtime.GOMAXPROCS(cfg.MaxProcs)
	}
	log.Info("starting", "version", buildVersion(version, readBuildInfo()), "config_file", path, "pipelines", len(specs),
		"replica", fc.Replica, "replicas", fc.Replicas, "max_procs", runtime.GOMAXPROCS(0), "process", config.Dump(processFlags(fs)))
	for _, p := range file.Pipelines {
		log.Info("pipeline", "pipeline", p.Name, "config", config.Dump(p.Flags))
	}
	if err := runFleet(ctx, fc, specs, cfg, func() ([]fleet.Spec, error) {
		f, err := loadPipelinesFile(path, nil, getenv)
		if err != nil {
			return nil, err
		}
		return fleetSpecs(f, clients, linger)
	}, log); err != nil {
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
	fc := cfg.Fleet
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

// fleetSpecs are the file's pipelines as the fleet runs them, the
// at-least-once ones sharing clients, all of them lingering together. A pipeline's fingerprint hashes
// every setting its flags hold (secrets too: a rotated password restarts
// it; the hash never leaves the process).
func fleetSpecs(file config.File, clients *publish.Pool, linger *readpace.Shared) ([]fleet.Spec, error) {
	specs := make([]fleet.Spec, 0, len(file.Pipelines))
	process := config.ProcessFlags()
	for _, p := range file.Pipelines {
		pc, err := p.Config.Pipeline()
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: %w", p.Name, err)
		}
		pc.Stream.SharedLinger = linger
		if pc.Delivery != pipeline.ExactlyOnce {
			pc.Clients, pc.ClientKey = clients, config.KafkaClientKey(p.Flags)
		}
		h := sha256.New()
		p.Flags.VisitAll(func(f *flag.Flag) {
			// The process's settings are not the pipeline's: a reload
			// reads them from the file alone, the first load from the
			// command line and the environment too.
			if !slices.Contains(process, f.Name) {
				fmt.Fprintf(h, "%s=%q\n", f.Name, f.Value.String())
			}
		})
		specs = append(specs, fleet.Spec{Name: p.Name, Config: pc, Fingerprint: hex.EncodeToString(h.Sum(nil))})
	}
	return specs, nil
}

// runFleet runs the fleet and the metrics server until ctx ends; SIGHUP
// calls reload and applies what it returns (or logs why not, changing
// nothing).
func runFleet(ctx context.Context, fc fleet.Config, specs []fleet.Spec, cfg *config.Config, reload func() ([]fleet.Spec, error), log *slog.Logger) error {
	reg := ops.NewRegistry()
	var mu sync.Mutex
	metrics := map[*fleet.Member]*ops.Metrics{}
	hooks := fleet.Hooks{
		Added: func(m *fleet.Member) {
			c := m.Counts()
			om, err := ops.NewMetrics(reg, m.Name(), m, m, ops.Counts{DataLoss: c.DataLoss, Heartbeats: c.Heartbeats,
				KafkaTransactions: c.KafkaTransactions, SkippedRecords: c.SkippedRecords, Kafka: m, Supervision: m})
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
	f, err := fleet.New(fc, specs, hooks, log)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	if cfg.MetricsAddr != "" {
		health := func() []ops.PipelineHealth {
			var out []ops.PipelineHealth
			for _, m := range f.Members() {
				out = append(out, ops.PipelineHealth{Name: m.Name(), Stats: m, Kafka: m, Reach: m, Supervision: m, Replicated: fc.Replicas > 1})
			}
			return out
		}
		srv := &ops.Server{Addr: cfg.MetricsAddr, Registry: reg, Pipelines: health, Log: log, Pprof: cfg.Pprof}
		if _, err := srv.Listen(); err != nil {
			return err
		}
		g.Go(func() error { return srv.Run(gctx) })
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Ignore(syscall.SIGHUP) // as before run: SIGHUP is no reason to die
	g.Go(func() error {
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-hup:
				specs, err := reload()
				if err != nil {
					log.Error("reloading the pipelines file on SIGHUP: it has problems; nothing changed", "err", err)
					continue
				}
				if err := f.Reload(specs); err != nil {
					log.Error("reloading the pipelines file on SIGHUP: nothing changed", "err", err)
				}
			}
		}
	})
	g.Go(func() error { return f.Run(gctx) })
	return g.Wait()
}
