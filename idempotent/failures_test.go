package idempotent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/idempotent"
)

// Regression (issue 37, bug 2): the consumer package ran a handler twice
// under REPEATABLE READ. Its transaction began with the server's default
// isolation; under default_transaction_isolation = 'repeatable read' the
// snapshot was taken by the advisory lock statement, before the lock was
// granted, so the insert after it did not see the key another consumer of
// the same name had committed meanwhile, and could not conflict with it
// either (processed_at is part of the primary key). Here the first
// consumer is held inside its handler, holding the key's lock, until the
// second waits at that lock: the race is forced, not hoped for.
func TestRepeatableReadDefaultDoesNotRunAHandlerTwice(t *testing.T) {
	t.Parallel()
	b := newBed(t, 1)
	b.repeatableReadByDefault(t)
	const n = 10
	b.produce(t, seq(1, n)...)
	name := testenv.Name(t, "svc")
	var calls counts
	held, release := make(chan struct{}), make(chan struct{})
	h := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		id, _ := idempotent.IDHeader(r)
		if calls.add(id) == 1 && id == "1" {
			close(held)
			select {
			case <-release:
			case <-t.Context().Done():
			}
		}
		return insertBusiness(name)(ctx, tx, r)
	}
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	// Two groups, so that Kafka hands every record to both.
	first := b.start(t, idempotent.Config{Name: name, Handler: h, Metrics: regs[0]})
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("the first consumer did not reach the handler of key 1")
	}
	second := b.start(t, idempotent.Config{Name: name, Handler: h, Metrics: regs[1]})
	testenv.Eventually(t, time.Minute, "the second consumer waiting at the first one's advisory lock", func() bool {
		var waiting bool
		err := b.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database())`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	close(release)
	for i, reg := range regs {
		testenv.Eventually(t, time.Minute, fmt.Sprintf("consumer %d through all %d records", i+1, n), func() bool {
			return testenv.CounterValue(t, reg, "outboxd_consumer_processed_total")+
				testenv.CounterValue(t, reg, "outboxd_consumer_duplicates_total") >= n
		})
	}
	for _, r := range []*running{first, second} {
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range seq(1, n) {
		if got := calls.get(fmt.Sprint(id)); got != 1 {
			t.Errorf("key %d: the handler ran %d times, want 1", id, got)
		}
	}
	if rows, twice := b.rows(t, name); rows != n || twice != 0 {
		t.Errorf("%d business rows, %d keys twice; want %d and 0", rows, twice, n)
	}
}

// repeatableReadByDefault sets the bed database's
// default_transaction_isolation to repeatable read and replaces b.pool with
// a pool whose connections start with it.
func (b *bed) repeatableReadByDefault(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	var db string
	if err := b.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET default_transaction_isolation = 'repeatable read'`); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, b.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var level string
	if err := pool.QueryRow(ctx, `SHOW default_transaction_isolation`).Scan(&level); err != nil || level != "repeatable read" {
		t.Fatalf("default_transaction_isolation = %q (%v), want repeatable read", level, err)
	}
	b.pool = pool
}

// Regression (issue 37, bug 6): a database restart dead-lettered a healthy
// record. Connection errors counted toward MaxAttempts like the
// handler's refusals, so after about 1.5 s of retries (the default
// budget) the record went to the dead-letter topic and its key was
// recorded as processed: it was never handled. Here the database stays
// down until the consumer has retried three times MaxAttempts (counted,
// not timed); the record must then be processed once, and nothing
// dead-lettered.
func TestDatabaseRestartIsRetriedNotDeadLettered(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	b := newBedOn(t, testenv.DatabaseOn(t, pg.URL), 1)
	var down atomic.Bool
	t.Cleanup(func() { // before the database is dropped
		if down.Load() {
			_ = pg.Start(context.Background())
		}
	})
	dlq := testenv.Topic(t, 1)
	group := testenv.Name(t, "group")
	reg := prometheus.NewRegistry()
	var logs warnings
	const maxAttempts = 3
	r := b.start(t, idempotent.Config{Group: group, MaxAttempts: maxAttempts, RetryInitial: time.Millisecond, RetryMax: 20 * time.Millisecond,
		DeadLetterTopic: dlq, Metrics: reg, Log: slog.New(&logs)})
	b.produce(t, 1)
	b.waitRows(t, group, 1)

	down.Store(true)
	if err := pg.Stop(t.Context(), "fast"); err != nil {
		t.Fatal(err)
	}
	b.produce(t, 2)
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%d retries while the database is down", 3*maxAttempts), func() bool {
		if done, err := r.returned(); done {
			t.Fatalf("Run returned during the outage: %v", err)
		}
		return testenv.CounterValue(t, reg, "outboxd_consumer_retries_total") >= 3*maxAttempts
	})
	if err := pg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	down.Store(false)

	b.waitRows(t, group, 2)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if rows, twice := b.rows(t, group); rows != 2 || twice != 0 {
		t.Errorf("%d business rows, %d twice; want 2 and 0", rows, twice)
	}
	if got := testenv.CounterValue(t, reg, "outboxd_consumer_dead_lettered_total"); got != 0 {
		t.Errorf("outboxd_consumer_dead_lettered_total = %v, want 0", got)
	}
	if n := endOffset(t, b.brokers, dlq); n != 0 {
		t.Errorf("the dead-letter topic holds %d records, want 0", n)
	}
	if n := logs.transient.Load(); n < 3*maxAttempts {
		t.Errorf("%d transient retries logged at Warn, want at least %d", n, 3*maxAttempts)
	}
}

// A transient error the handler itself returns (its own statement's
// serialization failure or deadlock, its connection terminated, a network
// error) is retried past MaxAttempts and the record processed once,
// never dead-lettered; a refusal (a plain error, a constraint its write
// violates) is dead-lettered after exactly MaxAttempts calls. A lone
// record, so that no batch try adds a call.
func TestHandlerTransientErrorsAreRetriedAndRefusalsDeadLettered(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	exec := func(sql string) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql)
			return err
		}
	}
	nobody := closedAddr(t)
	for _, tc := range []struct {
		name      string
		fail      func(context.Context, pgx.Tx) error
		transient bool
	}{
		{"serialization failure of its own statement", exec(`DO $$BEGIN RAISE EXCEPTION 'could not serialize' USING ERRCODE = 'serialization_failure'; END$$`), true},
		{"deadlock of its own statement", exec(`DO $$BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = 'deadlock_detected'; END$$`), true},
		{"its connection terminated", exec(`SELECT pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid())`), true},
		{"a network error", func(context.Context, pgx.Tx) error {
			_, err := net.Dial("tcp", nobody)
			return fmt.Errorf("calling the pricing service: %w", err)
		}, true},
		{"refused", func(context.Context, pgx.Tx) error { return errors.New("business rule refused it") }, false},
		{"refused by a constraint", exec(`INSERT INTO business (key, consumer) VALUES (NULL, 'nobody')`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBed(t, 1)
			dlq := testenv.Topic(t, 1)
			group := testenv.Name(t, "group")
			reg := prometheus.NewRegistry()
			failures := int64(2 * maxAttempts) // past the budget, then it succeeds
			if !tc.transient {
				failures = 1 << 62 // never succeeds
			}
			var calls atomic.Int64
			h := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
				if calls.Add(1) <= failures {
					return tc.fail(ctx, tx)
				}
				return insertBusiness(group)(ctx, tx, r)
			}
			r := b.start(t, idempotent.Config{Group: group, Handler: h, MaxAttempts: maxAttempts, RetryInitial: time.Millisecond,
				RetryMax: 10 * time.Millisecond, DeadLetterTopic: dlq, Metrics: reg})
			b.produce(t, 1)
			testenv.Eventually(t, time.Minute, "the record processed or dead-lettered", func() bool {
				if done, err := r.returned(); done {
					t.Fatalf("Run returned: %v", err)
				}
				return testenv.CounterValue(t, reg, "outboxd_consumer_processed_total")+
					testenv.CounterValue(t, reg, "outboxd_consumer_dead_lettered_total") >= 1
			})
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			rows, _ := b.rows(t, group)
			deadLettered := testenv.CounterValue(t, reg, "outboxd_consumer_dead_lettered_total")
			if tc.transient {
				if rows != 1 || deadLettered != 0 || calls.Load() != failures+1 {
					t.Errorf("%d business rows, %v dead-lettered, %d handler calls; want 1, 0 and %d (retried past MaxAttempts %d)",
						rows, deadLettered, calls.Load(), failures+1, maxAttempts)
				}
				return
			}
			if rows != 0 || deadLettered != 1 || calls.Load() != maxAttempts {
				t.Errorf("%d business rows, %v dead-lettered, %d handler calls; want 0, 1 and MaxAttempts %d",
					rows, deadLettered, calls.Load(), maxAttempts)
			}
			var recorded bool
			if err := b.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM processed_keys WHERE consumer = $1 AND key = '1')`, group).Scan(&recorded); err != nil || !recorded {
				t.Errorf("the dead-lettered key is not recorded as processed (%v)", err)
			}
		})
	}
}

// counts counts handler calls per key.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) add(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return c.n[key]
}

func (c *counts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// warnings is a slog.Handler counting the consumer's Warn records of
// transient retries.
type warnings struct{ transient atomic.Int64 }

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && r.Message == "retrying after a transient failure" {
		w.transient.Add(1)
	}
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// endOffset is the number of records in a one-partition topic.
func endOffset(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	offs, err := testenv.Admin(t, brokers).ListEndOffsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("the end offset of %s: %v", topic, o.Err)
	}
	return o.Offset
}
