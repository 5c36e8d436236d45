package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/publish"
	"golang.org/x/sync/errgroup"
)

func envName(flagName string) string { return config.EnvName(flagName) }

var runFlags = []string{
	config.FlagDatabaseURL, config.FlagBrokers, config.FlagSlot, config.FlagPublication, config.FlagCreateSlot,
	config.FlagMaxInFlightRecords, config.FlagMaxInFlightBytes, config.FlagLinger, config.FlagAllowAutoTopicCreation,
	config.FlagStatusInterval, config.FlagShutdownTimeout, config.FlagSlotRetryInterval, config.FlagReconnectMaxInterval,
	config.FlagMetricsAddr, config.FlagPprof, config.FlagWALCheckInterval, config.FlagWALRetainedWarnBytes, config.FlagHeartbeatInterval,
	config.FlagKafkaTLS, config.FlagKafkaTLSCAFile, config.FlagKafkaTLSCertFile, config.FlagKafkaTLSKeyFile, config.FlagKafkaTLSInsecure,
	config.FlagKafkaSASLMechanism, config.FlagKafkaSASLUsername, config.FlagKafkaSASLPassword,
	config.FlagLogLevel, config.FlagLogFormat,
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs := newFlagSet("run", "Streams committed inserts of the publication's tables from the slot to Kafka until\nSIGTERM or SIGINT, then finishes the open transaction, waits for Kafka and confirms.\nSIGHUP is ignored.", stderr)
	cfg.Register(fs, runFlags...)
	if code, ok := parseFlags("run", fs, args, stderr, getenv); !ok {
		return code
	}
	if code, ok := validate("run", &cfg, fs, stderr); !ok {
		return code
	}
	log := cfg.Logger(os.Stderr)
	if err := runPublisher(ctx, cfg, log); err != nil {
		log.Error("outboxd run stopped", "err", err)
		return exitError
	}
	return exitOK
}

// runPublisher wires publish, cdc and the operations side (metrics, health,
// WAL monitor, heartbeat) and runs until ctx ends or a permanent error.
func runPublisher(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	log.Info("starting", "version", version, "config", cfg)
	kopts, err := cfg.KafkaOpts()
	if err != nil {
		return err
	}
	pub, err := publish.New(publish.Config{
		Brokers:                cfg.BrokerList(),
		MaxInFlightRecords:     cfg.MaxInFlightRecords,
		MaxInFlightBytes:       cfg.MaxInFlightBytes,
		Linger:                 cfg.Linger,
		AllowAutoTopicCreation: cfg.AllowAutoTopicCreation,
		Opts:                   kopts,
	}, log)
	if err != nil {
		return err
	}
	defer pub.Close()
	st := cdc.New(cdc.Config{
		DatabaseURL:          cfg.DatabaseURL,
		Slot:                 cfg.Slot,
		CreateSlot:           cfg.CreateSlot,
		Publication:          cfg.Publication,
		StatusInterval:       cfg.StatusInterval,
		ShutdownTimeout:      cfg.ShutdownTimeout,
		SlotRetryInterval:    cfg.SlotRetryInterval,
		ReconnectMaxInterval: cfg.ReconnectMaxInterval,
	}, pub, log)
	wal := &cdc.WALMonitor{DatabaseURL: cfg.DatabaseURL, Slot: cfg.Slot, Publication: cfg.Publication,
		Interval: cfg.WALCheckInterval, WarnBytes: cfg.WALRetainedWarnBytes, Log: log}

	g, gctx := errgroup.WithContext(ctx)
	if cfg.MetricsAddr != "" {
		m := ops.NewMetrics(st, wal, pub.BufferedBytes)
		st.Observe(m)
		srv := &ops.Server{Addr: cfg.MetricsAddr, Metrics: m, Stats: st, Kafka: pub, Log: log, Pprof: cfg.Pprof}
		if _, err := srv.Listen(); err != nil {
			return err
		}
		g.Go(func() error { return srv.Run(gctx) })
	}
	g.Go(func() error { return wal.Run(gctx) })
	if cfg.HeartbeatInterval > 0 {
		g.Go(func() error { return cdc.Heartbeat(gctx, cfg.DatabaseURL, cfg.HeartbeatInterval, log) })
	}
	// Run returns nil only once gctx ended: on SIGTERM, or when a sibling
	// failed (then g.Wait returns that sibling's error).
	g.Go(func() error { return st.Run(gctx) })
	return g.Wait()
}
