package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"

	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/sqlquote"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/slot"
)

func envName(flagName string) string { return config.EnvName(flagName) }

var runGroups = []config.Group{
	config.GroupDatabase, config.GroupSlot, config.GroupPublication, config.GroupCreateSlot, config.GroupBackfill, config.GroupColumns,
	config.GroupPump, config.GroupKafka, config.GroupDelivery, config.GroupStream, config.GroupOps, config.GroupLog,
}

// registerRunFlags registers run's flags: runGroups, and --table, which
// run checks only when given (its default is empty, not migrate's
// public.outbox: run streams the publication's tables, whichever they are).
func registerRunFlags(cfg *config.Config, fs *flag.FlagSet) {
	cfg.Register(fs, runGroups...)
	fs.StringVar(&cfg.Stream.Table, "table", "", "outbox table the publication must publish, in SQL syntax as migrate's --table (app.outbox, or \"App\".\"Outbox\"): "+
		"run refuses to start while the publication does not publish it. Empty: not checked, the publication's tables are streamed as they are")
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs := newFlagSet("run", "Streams committed inserts of the publication's tables from the slot to Kafka until\nSIGTERM or SIGINT, then finishes the open transaction, waits for Kafka and confirms.\nSIGHUP is ignored.", stderr)
	registerRunFlags(&cfg, fs)
	if code, ok := parseFlags("run", fs, args, stderr, getenv); !ok {
		return code
	}
	cfg.ApplyLayout(fs)
	var tableErr error
	if cfg.Stream.Table != "" {
		if _, err := sqlquote.ParseQualified(cfg.Stream.Table); err != nil {
			tableErr = fmt.Errorf("--table (%s): %w", envName("table"), err)
		}
	}
	if code, ok := validate("run", &cfg, fs, stderr, tableErr); !ok {
		return code
	}
	cfg.Stream.Columns = cfg.Mapping()
	if cfg.MaxProcs > 0 {
		runtime.GOMAXPROCS(cfg.MaxProcs)
	}
	log := cfg.Logger(os.Stderr)
	log.Info("starting", "version", version, "config", config.Dump(fs))
	if err := runPublisher(ctx, cfg, log); err != nil {
		log.Error("outboxd run stopped", "err", err)
		printRecovery(stderr, err)
		var auth *cdc.AuthError
		if errors.As(err, &auth) {
			// Refused at start: the database URL's credentials are
			// configuration, and no retry fixes them (cdc.Streamer.Run).
			return exitUsage
		}
		return exitError
	}
	return exitOK
}

// runPublisher wires the pipeline (cdc reader → pump → publish) and the
// operations side (metrics, health, WAL monitor, heartbeat) and runs until
// ctx ends or a permanent error.
func runPublisher(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	kopts, err := cfg.KafkaOpts()
	if err != nil {
		return err
	}
	kafka := cfg.Kafka
	// reach counts every Kafka client's failed dials and requests: a wrong
	// --brokers is retried for ever, and must not look healthy meanwhile.
	reach := publish.NewReachability(kafka.Brokers, log)
	kafka.Opts = append(append(kafka.Opts, kopts...), reach.Hooks())
	var (
		txn *publish.TxnProducer
		snk sink
		st  *cdc.Streamer // set below, before anything is published
	)
	if cfg.Delivery == config.DeliveryExactlyOnce {
		// The progress key names the server the records come from, as
		// their own replication connection identified it.
		identify := func(ctx context.Context) (publish.Server, error) {
			sys, timeline, walEnd, err := st.Server(ctx)
			return publish.Server{SystemID: sys, Timeline: timeline, WALEnd: walEnd}, err
		}
		txn, err = publish.NewTxn(cfg.Txn, kafka, cfg.Stream.Slot, identify, log)
		snk = txn
		cfg.Stream.StopOnServerChange = true
	} else {
		snk, err = publish.New(kafka, log)
	}
	if err != nil {
		return err
	}
	defer snk.Close()
	if t := cfg.Pump.DeadLetterTopic; t != "" {
		if err := checkDeadLetterTopic(ctx, snk, t, kafka.AllowAutoTopicCreation, log); err != nil {
			return err
		}
		cfg.Stream.TolerateUnusableTables = true // their rows go to the dead-letter topic
	}
	p, err := pump.New(cfg.Pump, snk, log)
	if err != nil {
		return err
	}
	st, err = cdc.New(cfg.Stream, p, log)
	if err != nil {
		return err
	}
	mon := cfg.Monitor
	mon.DatabaseURL, mon.Slot, mon.Publication = cfg.Stream.DatabaseURL, cfg.Stream.Slot, cfg.Stream.Publication
	mon.AcknowledgedCommit = p.FlushedCommitTime
	wal, err := slot.NewMonitor(mon, log)
	if err != nil {
		return err
	}
	var hb *slot.Heartbeat
	if cfg.Heartbeat > 0 {
		if hb, err = slot.NewHeartbeat(slot.HeartbeatConfig{DatabaseURL: cfg.Stream.DatabaseURL, Interval: cfg.Heartbeat}, log); err != nil {
			return err
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	if cfg.MetricsAddr != "" {
		counts := ops.Counts{DataLoss: snk.DataLossEvents, Kafka: reach}
		if hb != nil {
			counts.Heartbeats = hb.Written
		}
		if txn != nil {
			counts.KafkaTransactions = func() uint64 { return txn.Stats().Committed }
			counts.SkippedRecords = func() uint64 { return txn.Stats().Skipped }
		}
		m := ops.NewMetrics(st, wal, counts)
		p.Observe(m)
		srv := &ops.Server{Addr: cfg.MetricsAddr, Metrics: m, Stats: st, Kafka: snk, Reach: reach, Log: log, Pprof: cfg.Pprof}
		if _, err := srv.Listen(); err != nil {
			return err
		}
		g.Go(func() error { return srv.Run(gctx) })
	}
	// Kafka is checked beside the pipeline, not before it: while it does
	// not answer, the stream goes on and its records wait.
	g.Go(func() error { return reach.CheckAtStart(gctx, snk.Ping) })
	g.Go(func() error { return wal.Run(gctx) })
	if hb != nil {
		g.Go(func() error { return hb.Run(gctx) })
	}
	// Run returns nil only once gctx ended: on SIGTERM, or when a sibling
	// failed (then g.Wait returns that sibling's error).
	if txn == nil {
		g.Go(func() error { return st.Run(gctx) })
		return g.Wait()
	}
	// The exactly-once sink commits the records the stream drains at a
	// stop, so it outlives the stream; it stops it when it fails (fenced,
	// a record refused): its records fail, and so does the pump.
	sinkCtx, stopSink := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSink()
	g.Go(func() error { return txn.Run(sinkCtx) })
	g.Go(func() error {
		defer stopSink()
		return st.Run(gctx)
	})
	return g.Wait()
}

// sink is what run needs of either producer.
type sink interface {
	pump.Sink
	Ping(ctx context.Context) error
	topicAdmin
	DataLossEvents() uint64
	Close()
}

// registered lists the flags a command registered (for tests).
func registered(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}
