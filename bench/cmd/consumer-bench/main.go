// Command consumer-bench measures what package idempotent costs a
// consumer: records/s of a consumer group writing one business row per
// record, with the dedupe (processed_keys, in the same transaction) against
// a plain consumer doing the same business insert in transactions of the
// same size, at batch sizes 1, 100 and 1000, in one run on private servers
// started through the test bed. Each cell is repeated (-reps, default 5)
// alternating the two consumers; the report gives the median, the range,
// and the ratio of the medians. It writes docs/bench/consumer/README.md and
// results.json.
//
//	make bench      (not part of make test)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/bench/internal/cmdline"
	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/idempotent"
)

type options struct {
	testbed string
	reps    int
	out     string
	batches []int
}

// cell is one batch size's measurements.
type cell struct {
	Batch      int       `json:"batch"`
	Records    int       `json:"records"`
	Plain      []float64 `json:"plain_records_per_s"`
	Idempotent []float64 `json:"idempotent_records_per_s"`
}

func main() {
	var o options
	flag.StringVar(&o.testbed, "testbed", "harness/testbed/testbed.sh", "test bed script")
	flag.IntVar(&o.reps, "reps", 5, "repetitions of each consumer at each batch size")
	flag.StringVar(&o.out, "out", "docs/bench/consumer", "output directory")
	batches := flag.String("batches", "1,100,1000", "batch sizes (records per database transaction)")
	flag.Parse()
	var err error
	if o.batches, err = cmdline.PositiveInts("batches", *batches); err != nil {
		fmt.Fprintln(os.Stderr, "consumer-bench:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, "consumer-bench:", err)
		os.Exit(1)
	}
}

// recordsFor keeps every run a few seconds long: a transaction and an
// offset commit per record is slow, so small batches get fewer records.
func recordsFor(batch int) int {
	switch {
	case batch < 10:
		return 1000
	case batch < 500:
		return 50000
	}
	return 100000
}

func run(ctx context.Context, o options, log *slog.Logger) (err error) {
	pg, err := testbed.StartPostgres(ctx, o.testbed)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pg.Remove(context.WithoutCancel(ctx))) }()
	kafka, err := testbed.StartKafkaTemp(ctx, o.testbed)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, kafka.Remove(context.WithoutCancel(ctx))) }()
	pool, err := pgxpool.New(ctx, pg.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka.Addr))
	if err != nil {
		return err
	}
	defer cl.Close()

	var cells []cell
	for _, batch := range o.batches {
		c := cell{Batch: batch, Records: recordsFor(batch)}
		topic := fmt.Sprintf("bench.consumer.%d", batch)
		if err := fill(ctx, cl, topic, c.Records); err != nil {
			return err
		}
		for rep := range o.reps {
			for _, dedupe := range []bool{false, true} {
				rate, err := measure(ctx, pool, kafka.Addr, topic, c.Records, batch, dedupe, rep)
				if err != nil {
					return err
				}
				if dedupe {
					c.Idempotent = append(c.Idempotent, rate)
				} else {
					c.Plain = append(c.Plain, rate)
				}
				log.Info("measured", "batch", batch, "dedupe", dedupe, "rep", rep+1, "records_per_s", int(rate))
			}
		}
		cells = append(cells, c)
	}
	return write(o.out, o.reps, cells)
}

// fill produces n records with outboxd's id header to a new topic.
func fill(ctx context.Context, cl *kgo.Client, topic string, n int) error {
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		return fmt.Errorf("creating %s: %w", topic, err)
	}
	recs := make([]*kgo.Record, 0, n)
	for i := 1; i <= n; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i % 50)),
			Value:   []byte(fmt.Sprintf(`{"order": %d, "pad": "%0200d"}`, i, 0)),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(strconv.Itoa(i))}}})
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// measure consumes the whole topic with a new group into a new business
// table and returns records/s from the first poll to the last commit.
func measure(ctx context.Context, pool *pgxpool.Pool, broker, topic string, n, batch int, dedupe bool, rep int) (float64, error) {
	table := fmt.Sprintf("business_%d_%d_%t", batch, rep, dedupe)
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (outbox_id text NOT NULL, payload jsonb NOT NULL)`); err != nil {
		return 0, err
	}
	insert := `INSERT INTO ` + table + ` (outbox_id, payload) VALUES ($1, $2)`
	business := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		id, err := idempotent.IDHeader(r)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, insert, id, string(r.Value))
		return err
	}
	var elapsed time.Duration
	var err error
	if dedupe {
		elapsed, err = consumeIdempotent(ctx, pool, broker, topic, table, batch, n, business)
	} else {
		elapsed, err = consumePlain(ctx, pool, broker, topic, table, batch, n, business)
	}
	if err != nil {
		return 0, err
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&rows); err != nil || rows != n {
		return 0, fmt.Errorf("%s: %d business rows, want %d (%v)", table, rows, n, err)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// consumePlain is the reference: the same business insert, batch records
// per transaction, offsets committed after each commit, no dedupe.
func consumePlain(ctx context.Context, pool *pgxpool.Pool, broker, topic, group string, batch, n int, business idempotent.Handler) (time.Duration, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	if err != nil {
		return 0, err
	}
	defer cl.CloseAllowingRebalance()
	var start time.Time
	done := 0
	for done < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return 0, err
		}
		if start.IsZero() {
			start = time.Now()
		}
		recs := fs.Records()
		for len(recs) > 0 {
			k := min(batch, len(recs))
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for _, r := range recs[:k] {
					if err := business(ctx, tx, r); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return 0, err
			}
			if err := cl.CommitRecords(ctx, recs[:k]...); err != nil {
				return 0, err
			}
			done += k
			recs = recs[k:]
		}
		cl.AllowRebalance()
	}
	return time.Since(start), nil
}

// consumeIdempotent runs the package's Consumer until its processed
// counter (incremented after each database commit) reaches n. (Polling the
// business table instead cost the measured run CPU the plain one did not
// pay: a count(*) every 20 ms on 2 cores.)
func consumeIdempotent(ctx context.Context, pool *pgxpool.Pool, broker, topic, table string, batch, n int, business idempotent.Handler) (time.Duration, error) {
	var start atomic.Int64 // unix nanoseconds of the first record handled
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		start.CompareAndSwap(0, time.Now().UnixNano())
		return business(ctx, tx, r)
	}
	reg := prometheus.NewRegistry()
	c, err := idempotent.New(ctx, idempotent.Config{Brokers: []string{broker}, Group: table, Topics: []string{topic}, BatchSize: batch, Handler: h,
		MaintenanceInterval: -1, Metrics: reg}, pool)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	for {
		select {
		case err := <-done:
			return 0, fmt.Errorf("consumer stopped early: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
		if processed(reg) >= float64(n) {
			elapsed := time.Since(time.Unix(0, start.Load()))
			cancel()
			return elapsed, <-done
		}
	}
}

// processed reads outboxd_consumer_processed_total.
func processed(reg *prometheus.Registry) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "outboxd_consumer_processed_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func write(dir string, reps int, cells []cell) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(struct {
		Date  string `json:"date"`
		Reps  int    `json:"reps"`
		Cells []cell `json:"cells"`
	}{time.Now().UTC().Format(time.RFC3339), reps, cells}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# The idempotent consumer's cost\n\nRecorded by `make bench` (bench/cmd/consumer-bench) on %s: a consumer group reads\n", time.Now().UTC().Format("2006-01-02"))
	b.WriteString("a topic of records with outboxd's `id` header (3 partitions, ~230-byte JSON values) and writes one\n")
	b.WriteString("business row per record, in transactions of *batch* records, offsets committed after each commit:\n")
	b.WriteString("**plain** does only that; **idempotent** is package idempotent (one round trip that locks the batch's\n")
	b.WriteString("keys and records the new ones in processed_keys, then the handler) doing the same business insert. Each cell:\n")
	fmt.Fprintf(&b, "median of %d runs (range), the two consumers alternating, PostgreSQL 15 and Kafka 4.1 of the test bed\n", reps)
	b.WriteString("(fsync off), 2 cores. records/s from the first record in hand to the last batch committed.\n\n")
	b.WriteString("| batch | records | plain, records/s | idempotent, records/s | idempotent / plain |\n|---|---|---|---|---|\n")
	for _, c := range cells {
		fmt.Fprintf(&b, "| %d | %d | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2f |\n", c.Batch, c.Records,
			median(c.Plain), slices.Min(c.Plain), slices.Max(c.Plain), median(c.Idempotent), slices.Min(c.Idempotent), slices.Max(c.Idempotent),
			median(c.Idempotent)/median(c.Plain))
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}
