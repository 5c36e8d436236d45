// Package demo is `outboxd demo`: a throwaway PostgreSQL (package pgtemp)
// and an in-process Kafka (kfake), sample orders from concurrent writers
// (some transactions rolled back), and a consumer printing every record
// with its commit-to-receipt latency. The publisher itself is the one
// `outboxd run` wires, handed in as a function: nothing of the demo is on
// run's code path.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/internal/demo/pgtemp"
)

// Topics are the demo's topics.
var topics = []string{"orders.created", "orders.paid"}

// Options configures a demo run.
type Options struct {
	Writers  int           // concurrent writers
	Interval time.Duration // pause of each writer between transactions
	Events   int           // stop after the consumer received this many records (0: until ctx ends)
}

// Servers is where the demo's servers listen.
type Servers struct {
	DatabaseURL string
	Brokers     []string
}

// Run starts the servers, calls prepare (migrate) and then publish (the
// publisher, until its context ends) while writers and a consumer run, and
// removes everything at the end.
func Run(ctx context.Context, o Options, out io.Writer, prepare, publish func(context.Context, Servers) error) (err error) {
	fmt.Fprintln(out, "starting a throwaway PostgreSQL and an in-process Kafka ...")
	pg, err := pgtemp.Start(ctx, pgtemp.Options{Progress: out})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err = errors.Join(err, pg.Stop(sctx))
	}()
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	if err != nil {
		return fmt.Errorf("starting in-process Kafka: %w", err)
	}
	defer kafka.Close()
	srv := Servers{DatabaseURL: pg.URL, Brokers: kafka.ListenAddrs()}
	if err := prepare(ctx, srv); err != nil {
		return err
	}
	fmt.Fprintf(out, "PostgreSQL %s\nKafka      %s\nwriting orders from %d writers; Ctrl-C stops\n\n", pg.URL, srv.Brokers[0], o.Writers)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	pool, err := pgxpool.New(runCtx, pg.URL)
	if err != nil {
		return fmt.Errorf("connecting writers: %w", err)
	}
	defer pool.Close()

	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return publish(gctx, srv) })
	g.Go(func() error { return consume(gctx, srv.Brokers, out, o.Events, stop) })
	var seq atomic.Int64
	for w := range o.Writers {
		g.Go(func() error { return writeOrders(gctx, pool, w, o.Interval, &seq) })
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
			topic := topics[min(i, 1)]
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
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
