package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/pgtemp"
)

var demoTopics = []string{"orders.created", "orders.paid"}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	cfg.LogLevel = "warn"
	fs := newFlagSet("demo", "Starts a throwaway PostgreSQL (local server binaries) and an in-process Kafka,\nmigrates, runs the publisher, writes sample orders from concurrent writers and\nprints every record a consumer receives, with its commit-to-receipt latency.\nCtrl-C stops everything and removes the temporary cluster.", stderr)
	cfg.Register(fs, config.GroupLog)
	writers := fs.Int("writers", 3, "concurrent writers")
	interval := fs.Duration("interval", 500*time.Millisecond, "pause of each writer between transactions")
	events := fs.Int("events", 0, "stop after the consumer received this many records (0: run until Ctrl-C)")
	if code, ok := parseFlags("demo", fs, args, stderr, getenv); !ok {
		return code
	}
	if code, ok := validate("demo", &cfg, fs, stderr, positive("writers", *writers), positive("interval", int(*interval))); !ok {
		return code
	}
	log := cfg.Logger(os.Stderr)
	if err := demo(ctx, cfg, log, stdout, *writers, *interval, *events); err != nil {
		log.Error("outboxd demo failed", "err", err)
		return exitError
	}
	return exitOK
}

func positive(name string, v int) error {
	if v <= 0 {
		return fmt.Errorf("--%s: must be positive", name)
	}
	return nil
}

func demo(ctx context.Context, cfg config.Config, log *slog.Logger, out io.Writer, writers int, interval time.Duration, events int) (err error) {
	fmt.Fprintln(out, "starting a throwaway PostgreSQL and an in-process Kafka ...")
	pg, err := pgtemp.Start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err = errors.Join(err, pg.Stop(sctx))
	}()
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, demoTopics...))
	if err != nil {
		return fmt.Errorf("starting in-process Kafka: %w", err)
	}
	defer kafka.Close()

	cfg.Stream.DatabaseURL = pg.URL
	cfg.Kafka.Brokers = kafka.ListenAddrs()
	cfg.Stream.StatusInterval = time.Second
	cfg.Stream.ShutdownTimeout = 10 * time.Second
	if err := migrate(ctx, cfg, log); err != nil {
		return err
	}
	fmt.Fprintf(out, "PostgreSQL %s\nKafka      %s\nwriting orders from %d writers; Ctrl-C stops\n\n", pg.URL, cfg.Kafka.Brokers[0], writers)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	pool, err := pgxpool.New(runCtx, pg.URL)
	if err != nil {
		return fmt.Errorf("connecting writers: %w", err)
	}
	defer pool.Close()

	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return runPublisher(gctx, cfg, log) })
	g.Go(func() error { return consume(gctx, cfg.Kafka.Brokers, out, events, stop) })
	var seq atomic.Int64
	for w := range writers {
		g.Go(func() error { return writeOrders(gctx, pool, w, interval, &seq) })
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	fmt.Fprintln(out, "\nstopped; removing the temporary cluster")
	return err
}

// writeOrders inserts orders into the outbox, 1-3 events per transaction,
// sometimes rolling a transaction back (those never reach Kafka).
func writeOrders(ctx context.Context, pool *pgxpool.Pool, writer int, interval time.Duration, seq *atomic.Int64) error {
	rng := rand.New(rand.NewPCG(uint64(writer), uint64(time.Now().UnixNano())))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return ctxErr(ctx, fmt.Errorf("writer %d: %w", writer, err))
		}
		order := seq.Add(1)
		n := 1 + rng.IntN(3)
		for i := range n {
			topic := demoTopics[min(i, 1)]
			payload := fmt.Sprintf(`{"order": %d, "writer": %d, "amount_cents": %d}`, order, writer, 100+rng.IntN(10000))
			_, err = tx.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload, headers)
				VALUES (md5($1)::uuid, $2, $3, jsonb_build_object('type', $2::text))`, strconv.FormatInt(order, 10), topic, payload)
			if err != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
				return ctxErr(ctx, fmt.Errorf("writer %d: %w", writer, err))
			}
		}
		if rng.IntN(10) == 0 {
			err = tx.Rollback(ctx)
		} else {
			err = tx.Commit(ctx)
		}
		if err != nil {
			return ctxErr(ctx, fmt.Errorf("writer %d: %w", writer, err))
		}
	}
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// consume prints every record with its commit-to-receipt latency.
func consume(ctx context.Context, brokers []string, out io.Writer, limit int, stop func()) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(demoTopics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	seen := 0
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fetches.Err(); err != nil {
			return fmt.Errorf("consuming: %w", err)
		}
		now := time.Now()
		for _, r := range fetches.Records() {
			id := ""
			for _, h := range r.Headers {
				if h.Key == "id" {
					id = string(h.Value)
				}
			}
			fmt.Fprintf(out, "%-15s key=%s id=%-5s latency=%-8s %s\n", r.Topic, r.Key, id, now.Sub(r.Timestamp).Round(100*time.Microsecond), r.Value)
			seen++
			if limit > 0 && seen >= limit {
				stop()
				return nil
			}
		}
	}
}
