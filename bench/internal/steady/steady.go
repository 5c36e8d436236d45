// Package steady writes outbox rows at a steady rate into one database or
// many while a consumer reads their topics, and gives each event's latency
// from its commit, as the writer saw it, to its receipt by the consumer.
// It is the load of bench/cmd/outboxd-bench's steady-rate runs and of
// bench/cmd/fleet-bench's.
package steady

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Target is one database written into.
type Target struct {
	URL string // the database
	// Topic is where its rows are published: the consumer reads it, and
	// Insert gets it as $1. Each target has its own (outbox ids are
	// numbered per database).
	Topic string
	// Insert is one transaction's statement (autocommitted): it inserts
	// Load.TxSize rows and returns their outbox ids as text.
	Insert string
	// Writers is how many connections write into it, each at an equal
	// share of the rate.
	Writers int
}

// Load is one steady run.
type Load struct {
	// Brokers is where the consumer reads the targets' topics; "" runs
	// no consumer: the run only writes (a reader that is not a Kafka
	// consumer times the events), Ended is called right after the last
	// write and the Result has no deliveries or latencies.
	Brokers string
	Targets []Target
	// Rate is the events a second written over all targets, TxSize rows
	// a transaction, for Duration.
	Rate     int
	TxSize   int
	Duration time.Duration
	// Started, if set, is called just before the first write, and Ended
	// once every event arrived or the wait for stragglers is over: what a
	// caller reads at both is what the run cost.
	Started, Ended func()
}

// Result is what one run wrote and what arrived, with the latency
// quantiles of the events that did.
type Result struct {
	Written     int     `json:"written"`
	Delivered   int     `json:"delivered"`
	WrittenRate float64 `json:"written_events_per_second"`
	P50ms       float64 `json:"p50_ms"`
	P95ms       float64 `json:"p95_ms"`
	P99ms       float64 `json:"p99_ms"`
	Maxms       float64 `json:"max_ms"`
}

// OutboxInsert is Target.Insert for outboxd's default outbox table (as
// outboxd migrate creates it): size rows of a 200-byte jsonb payload, keyed
// by uuids that repeat from one transaction to the next.
func OutboxInsert(size int) string {
	return fmt.Sprintf(`INSERT INTO outbox (aggregate_id, topic, payload) SELECT md5(g::text)::uuid, $1, jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, %d) g RETURNING id::text`, size)
}

// DebeziumInsert is Target.Insert for Debezium's outbox table
// (bench/debezium/schema.sql): the same rows as OutboxInsert's, under a
// random id, all of aggregatetype "events", which the Outbox Event Router
// routes by (DebeziumTopic); the topic ($1) goes into the type column.
func DebeziumInsert(size int) string {
	return fmt.Sprintf(`INSERT INTO outbox_debezium (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), 'events', md5(g::text), $1, jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, %d) g RETURNING id::text`, size)
}

// DebeziumTopic is where Debezium's connector given topic prefix prefix
// (bench/debezium/run.sh) routes DebeziumInsert's rows: the prefix, then
// their aggregatetype.
func DebeziumTopic(prefix string) string { return prefix + ".events" }

// Reached reports whether the writers wrote at least 95% of rate. On a
// small machine they may not, whatever the system under test.
func (r Result) Reached(rate int) bool { return r.WrittenRate >= 0.95*float64(rate) }

// Sustained reports whether every event arrived, with a p99 under a second.
func (r Result) Sustained() bool { return r.Delivered == r.Written && r.P99ms < 1000 }

// stragglers is how long the run waits after the last write for the events
// still on their way.
const stragglers = 15 * time.Second

// Run writes l while a consumer notes when each event arrives.
func Run(ctx context.Context, l Load) (Result, error) {
	var res Result
	var mu sync.Mutex
	committed := map[string]time.Time{}
	received := map[string]time.Time{}
	topics := make([]string, len(l.Targets))
	writers := 0
	for i, t := range l.Targets {
		if slices.Contains(topics[:i], t.Topic) {
			return res, fmt.Errorf("two targets publish to topic %s: their outbox ids would be taken for each other", t.Topic)
		}
		topics[i] = t.Topic
		writers += t.Writers
	}
	if writers == 0 {
		return res, errors.New("a steady run without writers")
	}

	stopConsumer := func() {}
	if l.Brokers != "" {
		stop, err := consume(ctx, l.Brokers, topics, &mu, received)
		if err != nil {
			return res, err
		}
		stopConsumer = stop
	}

	interval := time.Duration(float64(time.Second) * float64(l.TxSize) * float64(writers) / float64(l.Rate))
	wctx, cancelWriters := context.WithTimeout(ctx, l.Duration)
	defer cancelWriters()
	g, gctx := errgroup.WithContext(wctx)
	if l.Started != nil {
		l.Started()
	}
	start := time.Now()
	for _, t := range l.Targets {
		for range t.Writers {
			g.Go(func() error {
				conn, err := pgx.Connect(ctx, t.URL)
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
					rows, err := conn.Query(ctx, t.Insert, t.Topic)
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
						committed[eventID(t.Topic, id)] = now
					}
					mu.Unlock()
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		stopConsumer()
		return res, fmt.Errorf("writing at %d events/s: %w", l.Rate, err)
	}
	wrote := time.Since(start)
	deadline := time.Now().Add(stragglers)
	for l.Brokers != "" && time.Now().Before(deadline) {
		mu.Lock()
		done := len(received) >= len(committed)
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l.Ended != nil {
		l.Ended()
	}
	stopConsumer()
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
	return res, nil
}

// consume starts a consumer of topics that notes in received when each
// event first arrived, and returns what stops it once the run is over.
func consume(ctx context.Context, brokers string, topics []string, mu *sync.Mutex, received map[string]time.Time) (stop func(), _ error) {
	// read_committed, as consumers of the exactly-once mode must read; for
	// the other systems, which do not write in transactions, it changes
	// nothing.
	// From each partition's end as it is before the first write: a
	// consumer told to start "at the end" takes the end when it first
	// fetches, which on a topic just created can come after the first
	// writes (their events were never counted as delivered).
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return nil, fmt.Errorf("starting the consumer: %w", err)
	}
	var ends kadm.ListedOffsets
	for deadline := time.Now().Add(30 * time.Second); ; { // a new topic's leaders may still be elected
		ends, err = kadm.NewClient(admCl).ListEndOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	admCl.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the end offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	from := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if from[o.Topic] == nil {
			from[o.Topic] = map[int32]kgo.Offset{}
		}
		from[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumePartitions(from),
		kgo.FetchMaxWait(10*time.Millisecond), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, fmt.Errorf("starting the consumer: %w", err)
	}
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
						id := eventID(r.Topic, strings.Trim(string(h.Value), `"`))
						if _, ok := received[id]; !ok {
							received[id] = now
						}
					}
				}
			})
			mu.Unlock()
		}
	}()
	return func() { cancelConsumer(); <-consumerDone; cl.Close() }, nil
}

// eventID names an event across targets, whose databases each number
// their outbox ids from 1.
func eventID(topic, id string) string { return topic + "\x00" + id }
