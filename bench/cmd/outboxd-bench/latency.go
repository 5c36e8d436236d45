package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/bench/relay"
)

// latencyResult is one steady-rate run: commit (as the writer saw it) to
// receipt by a consumer.
type latencyResult struct {
	System      string  `json:"system"`
	TargetRate  int     `json:"target_events_per_second"`
	WrittenRate float64 `json:"written_events_per_second"`
	Written     int     `json:"written"`
	Delivered   int     `json:"delivered"`
	P50ms       float64 `json:"p50_ms"`
	P95ms       float64 `json:"p95_ms"`
	P99ms       float64 `json:"p99_ms"`
	Maxms       float64 `json:"max_ms"`
	Sustained   bool    `json:"sustained"`
}

// latency runs the system against an empty outbox and writes at each rate.
func (e *env) latency(ctx context.Context, sys string) ([]latencyResult, error) {
	db := "bench_latency_" + sys
	topic := "bench.latency." + sys
	slot := db
	if err := e.sql(ctx, "postgres", "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)", "CREATE DATABASE "+db); err != nil {
		return nil, err
	}
	defer func() {
		_ = e.sql(context.WithoutCancel(ctx), "postgres",
			fmt.Sprintf("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '%s' AND NOT active", db),
			"DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	}()
	if err := e.createTopic(ctx, topic); err != nil {
		return nil, err
	}
	var insert string
	var stop func()
	switch sys {
	case "outboxd":
		if err := e.migrate(ctx, db); err != nil {
			return nil, err
		}
		insert = `INSERT INTO outbox (aggregate_id, topic, payload) SELECT md5(g::text)::uuid, $1, jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, 10) g RETURNING id::text`
		cmd := exec.Command(e.o.outboxd, "run", "--database-url", e.dbURL(db), "--brokers", e.kafka.Addr, "--slot", slot, "--log-level", "warn")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		stop = func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }
	case "relay":
		if err := e.sql(ctx, db, relay.Schema); err != nil {
			return nil, err
		}
		insert = `INSERT INTO outbox_relay (aggregate_id, topic, payload) SELECT md5(g::text)::uuid, $1, jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, 10) g RETURNING id::text`
		cmd := exec.Command(e.o.relay, "--database-url", e.dbURL(db), "--brokers", e.kafka.Addr, "--workers", "4", "--batch", "500", "--poll-interval", "100ms")
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		stop = func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }
	case "debezium":
		schema, err := os.ReadFile(filepath.Join(filepath.Dir(e.o.debezium), "schema.sql"))
		if err != nil {
			return nil, err
		}
		if err := e.sql(ctx, db, string(schema), `SELECT pg_create_logical_replication_slot('debezium', 'pgoutput')`); err != nil {
			return nil, err
		}
		// $1 (the topic) goes into the type column: routing is by aggregatetype.
		insert = `INSERT INTO outbox_debezium (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), 'events', md5(g::text), $1, jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, 10) g RETURNING id::text`
		topic = debeziumTopic(topic)
		_, _, s, err := e.startDebezium(ctx, db, strings.TrimSuffix(topic, ".events"))
		if err != nil {
			return nil, err
		}
		stop = s
	default:
		return nil, fmt.Errorf("no latency run for %s", sys)
	}
	defer stop()
	time.Sleep(3 * time.Second) // let it connect and settle
	var out []latencyResult
	for _, r := range strings.Split(e.o.rates, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil {
			return out, err
		}
		e.log.Info("latency", "system", sys, "rate", rate)
		res, err := e.steady(ctx, db, topic, insert, rate)
		if err != nil {
			return out, err
		}
		res.System = sys
		out = append(out, res)
		e.log.Info("latency", "system", sys, "rate", rate, "p50_ms", res.P50ms, "p99_ms", res.P99ms, "sustained", res.Sustained)
	}
	return out, nil
}

// steady writes rate events/s (10-row statements from 4 writers) for the
// run's rate duration while a consumer notes when each id arrives.
func (e *env) steady(ctx context.Context, db, topic, insert string, rate int) (latencyResult, error) {
	res := latencyResult{TargetRate: rate}
	var mu sync.Mutex
	committed := map[string]time.Time{}
	received := map[string]time.Time{}

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	cctx, cancelConsumer := context.WithCancel(ctx)
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == "id" {
						id := strings.Trim(string(h.Value), `"`)
						if _, ok := received[id]; !ok {
							received[id] = now
						}
					}
				}
			})
			mu.Unlock()
		}
	}()
	// Make sure the consumer has its partitions before writing.
	time.Sleep(time.Second)

	const writers = 4
	interval := time.Duration(float64(time.Second) * 10 * writers / float64(rate))
	wctx, cancelWriters := context.WithTimeout(ctx, e.o.rateDuration)
	defer cancelWriters()
	g, gctx := errgroup.WithContext(wctx)
	start := time.Now()
	for range writers {
		g.Go(func() error {
			conn, err := pgx.Connect(ctx, e.dbURL(db))
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			next := time.Now()
			for gctx.Err() == nil {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				next = next.Add(interval)
				rows, err := conn.Query(ctx, insert, topic)
				if err != nil {
					return err
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					return err
				}
				now := time.Now()
				mu.Lock()
				for _, id := range ids {
					committed[id] = now
				}
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		cancelConsumer()
		<-consumerDone
		return res, fmt.Errorf("writing at %d events/s: %w", rate, err)
	}
	wrote := time.Since(start)
	// Give stragglers up to 15 s.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := len(received) >= len(committed)
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancelConsumer()
	<-consumerDone
	var lat []float64
	for id, c := range committed {
		if r, ok := received[id]; ok {
			lat = append(lat, max(0, float64(r.Sub(c).Microseconds())/1000))
		}
	}
	slices.Sort(lat)
	res.Written, res.Delivered = len(committed), len(lat)
	res.WrittenRate = float64(len(committed)) / wrote.Seconds()
	if len(lat) > 0 {
		q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		res.P50ms, res.P95ms, res.P99ms, res.Maxms = q(0.50), q(0.95), q(0.99), lat[len(lat)-1]
	}
	res.Sustained = res.Delivered == res.Written && res.WrittenRate >= 0.95*float64(rate) && res.P99ms < 1000
	return res, nil
}
