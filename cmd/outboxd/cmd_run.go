package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/slot"
)

func envName(flagName string) string { return config.EnvName(flagName) }

var runGroups = []config.Group{
	config.GroupDatabase, config.GroupPrimary, config.GroupRunTable, config.GroupSlot, config.GroupPublication, config.GroupCreateSlot, config.GroupBackfill, config.GroupBackfillOrder, config.GroupColumns,
	config.GroupPump, config.GroupKafka, config.GroupDelivery, config.GroupRegistry, config.GroupStream, config.GroupOps, config.GroupLog, config.GroupFleet,
}

const runSynopsis = "Streams committed inserts of the publication's tables from the slot to Kafka until\nSIGTERM or SIGINT, then finishes the open transaction, waits for Kafka and confirms.\nWith --config, runs every pipeline of a pipelines file, and SIGHUP reloads the file;\nwithout, SIGHUP is ignored."

// runFlags builds run's flags on cfg. Its --table is run's own
// (GroupRunTable): checked only when given, its default empty, not
// migrate's public.outbox, since run streams the publication's tables,
// whichever they are.
func runFlags(cfg *config.Config, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("run", runSynopsis, stderr)
	configFlag(fs, "run every pipeline it lists in this process (docs/fleet.md); beside it, only the process's own flags")
	cfg.Register(fs, runGroups...)
	return fs
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs := runFlags(&cfg, stderr)
	if code, ok := parseFlags("run", fs, args, stderr, getenv); !ok {
		return code
	}
	if path := configPath(fs); path != "" {
		return runFile(ctx, path, &cfg, fs, args, stderr, getenv)
	}
	if given := fleetFlagsGiven(fs); given != "" {
		fmt.Fprintf(stderr, "outboxd run: %s only with --config (a pipelines file)\n", given)
		return exitUsage
	}
	cfg.ApplyLayout(fs)
	if code, ok := validate("run", &cfg, fs, stderr); !ok {
		return code
	}
	if cfg.Process.MaxProcs > 0 {
		runtime.GOMAXPROCS(cfg.Process.MaxProcs)
	}
	log := cfg.Logger(os.Stderr)
	log.Info("starting", "version", buildVersion(version, readBuildInfo()), "config", config.Dump(fs))
	if err := runPublisher(ctx, cfg, config.SettingsFingerprint(fs), log); err != nil {
		var pe *contain.PanicError
		if errors.As(err, &pe) {
			log.Error("outboxd run stopped: it panicked (a bug in outboxd: please report it with this stack); nothing was confirmed past what Kafka acknowledged",
				"err", err, "stack", string(pe.Stack))
			return exitError
		}
		log.Error("outboxd run stopped", "err", err)
		printRecovery(stderr, err)
		var auth *slot.AuthError
		if errors.As(err, &auth) {
			// Refused at start: the database URL's credentials are
			// configuration, and no retry fixes them (cdc.Streamer.Run).
			return exitUsage
		}
		return exitError
	}
	return exitOK
}

// runPublisher runs the pipeline the options describe, as a fleet of one
// that stops when it fails (fleet.Config.Single), and beside it the
// operations side (metrics, health), until ctx ends or a permanent error.
// settings is the fingerprint of its settings (slot.AppName).
func runPublisher(ctx context.Context, cfg config.Config, settings string, log *slog.Logger) error {
	pc, err := cfg.Pipeline(log)
	if err != nil {
		return err
	}
	budget := inFlightBudget(&cfg, log)
	pc.Pump.Budget = budget
	// The one pipeline is named after its slot: its series carry
	// pipeline="<slot>".
	spec := fleet.Spec{Name: cfg.Stream.WithDefaults().Slot, Config: pc, Settings: settings, Fingerprint: pausedFingerprint(pc.Paused)}
	return runPipelines(ctx, pipelinesRun{fleet: fleet.Config{Single: true}, specs: []fleet.Spec{spec}, budget: budget, pausable: true}, &cfg, log)
}

// pausedFingerprint tells the one pipeline of a run without a file paused
// from running: what a pause or a resume changes (pauseOnSignal).
func pausedFingerprint(paused bool) string {
	if paused {
		return "paused"
	}
	return "running"
}

// pauseOnSignal pauses the one pipeline of a run without a pipelines file
// on SIGUSR1 and resumes it on SIGUSR2, in g until ctx ends: a reload of
// the fleet with the pipeline's Paused changed, which drains and
// confirms the running pipeline before the paused one stands (a
// pipelines file pauses a pipeline with its paused key and SIGHUP).
func pauseOnSignal(ctx context.Context, g *errgroup.Group, f *fleet.Fleet, spec fleet.Spec, log *slog.Logger) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	g.Go(func() error {
		defer signal.Ignore(syscall.SIGUSR1, syscall.SIGUSR2) // as before run
		paused := spec.Config.Paused
		for {
			var sig os.Signal
			select {
			case <-ctx.Done():
				return nil
			case sig = <-sigs:
			}
			want := sig == syscall.SIGUSR1
			switch {
			case want == paused && paused:
				log.Info("SIGUSR1: the pipeline is paused already (SIGUSR2 resumes it)")
				continue
			case want == paused:
				log.Info("SIGUSR2: the pipeline is not paused (SIGUSR1 pauses it)")
				continue
			case want:
				log.Info("SIGUSR1: pausing the pipeline: it finishes its open transaction, waits for Kafka and confirms, then reads nothing until SIGUSR2")
			default:
				log.Info("SIGUSR2: resuming the pipeline from the slot's confirmed position")
			}
			paused = want
			s := spec
			s.Config.Paused, s.Fingerprint = paused, pausedFingerprint(paused)
			if err := f.Reload([]fleet.Spec{s}); err != nil {
				return err
			}
		}
	})
}

// registered lists the flags a command registered (for tests).
func registered(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// fleetFlagsGiven names the flags of group GroupFleet that were set, which
// mean something only with --config ("" when none).
func fleetFlagsGiven(fs *flag.FlagSet) string {
	var given []string
	for _, name := range config.GroupFlags(config.GroupFleet) {
		if set(fs, name) {
			given = append(given, "--"+name)
		}
	}
	return strings.Join(given, ", ")
}
