package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/publish"
)

func envName(flagName string) string { return config.EnvName(flagName) }

var runFlags = []string{
	config.FlagDatabaseURL, config.FlagBrokers, config.FlagSlot, config.FlagPublication, config.FlagCreateSlot,
	config.FlagMaxInFlightRecords, config.FlagMaxInFlightBytes, config.FlagLinger, config.FlagAllowAutoTopicCreation,
	config.FlagStatusInterval, config.FlagShutdownTimeout, config.FlagSlotRetryInterval, config.FlagReconnectMaxInterval,
	config.FlagLogLevel, config.FlagLogFormat,
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs := newFlagSet("run", "Streams committed inserts of the publication's tables from the slot to Kafka until\nSIGTERM or SIGINT, then finishes the open transaction, waits for Kafka and confirms.", stderr)
	cfg.Register(fs, runFlags...)
	if err := config.Parse(fs, args, getenv); err != nil {
		fmt.Fprintln(stderr, "outboxd run:", err)
		return parseExit(err)
	}
	if err := cfg.Validate(fs); err != nil {
		fmt.Fprintf(stderr, "outboxd run: invalid configuration:\n%v\n", err)
		return exitUsage
	}
	log := cfg.Logger(os.Stderr)
	if err := runPublisher(ctx, cfg, log); err != nil {
		log.Error("outboxd run stopped", "err", err)
		return exitError
	}
	return exitOK
}

// runPublisher wires publish and cdc and runs until ctx ends or a permanent
// error.
func runPublisher(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	pub, err := publish.New(publish.Config{
		Brokers:                cfg.BrokerList(),
		MaxInFlightRecords:     cfg.MaxInFlightRecords,
		MaxInFlightBytes:       cfg.MaxInFlightBytes,
		Linger:                 cfg.Linger,
		AllowAutoTopicCreation: cfg.AllowAutoTopicCreation,
	}, log)
	if err != nil {
		return err
	}
	defer pub.Close()
	log.Info("starting", "version", version, "slot", cfg.Slot, "publication", cfg.Publication,
		"brokers", cfg.Brokers, "max_in_flight_records", cfg.MaxInFlightRecords, "max_in_flight_bytes", cfg.MaxInFlightBytes,
		"status_interval", cfg.StatusInterval, "shutdown_timeout", cfg.ShutdownTimeout)
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
	return st.Run(ctx)
}
