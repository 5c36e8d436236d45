package idempotent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// bed is one test's database (with a business table), topic and brokers.
type bed struct {
	pool    *pgxpool.Pool
	brokers []string
	topic   string
}

func newBed(t *testing.T, partitions int32) *bed {
	t.Helper()
	return newBedOn(t, testenv.Database(t), partitions)
}

// newBedOn is newBed on a database of the caller's (on a private cluster).
func newBedOn(t *testing.T, dbURL string, partitions int32) *bed {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// No unique key: a record processed twice shows as two rows.
	if _, err := pool.Exec(t.Context(), `CREATE TABLE business (key text NOT NULL, consumer text NOT NULL, value text)`); err != nil {
		t.Fatal(err)
	}
	b := &bed{pool: pool, brokers: testenv.Brokers(t)}
	b.topic = testenv.Topic(t, partitions)
	return b
}

// produce writes one record per id, keyed by id%7 (like aggregates), with
// the id header outboxd sets; id < 0 writes a record without one.
func (b *bed) produce(t *testing.T, ids ...int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(ids))
	for i, id := range ids {
		recs[i] = &kgo.Record{Topic: b.topic, Key: []byte(strconv.Itoa(max(id, 0) % 7)), Value: []byte(fmt.Sprintf(`{"n": %d}`, id))}
		if id >= 0 {
			recs[i].Headers = []kgo.RecordHeader{{Key: "id", Value: []byte(strconv.Itoa(id))}}
		}
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// insertBusiness is the handler of most tests: one business row per record.
func insertBusiness(name string) idempotent.Handler {
	return func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		id, _ := idempotent.IDHeader(r)
		_, err := tx.Exec(ctx, `INSERT INTO business (key, consumer, value) VALUES ($1, $2, $3)`, id, name, string(r.Value))
		return err
	}
}

// running is a Consumer's Run in the background.
type running struct {
	c      *idempotent.Consumer
	cancel context.CancelFunc
	done   chan error
}

func (b *bed) start(t *testing.T, cfg idempotent.Config) *running {
	t.Helper()
	cfg.Brokers, cfg.Topics = b.brokers, []string{b.topic}
	if cfg.Group == "" {
		cfg.Group = testenv.Name(t, "group")
	}
	if cfg.Handler == nil {
		cfg.Handler = insertBusiness(cfg.Group)
	}
	c, err := idempotent.New(t.Context(), cfg, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t); c.Close() })
	return r
}

// stop ends Run gracefully and returns its error.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its context ending")
		return nil
	}
}

// wait returns Run's error once it returned on its own.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		close(r.done)
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return")
		return nil
	}
}

// returned reports whether Run returned by itself, and its error.
func (r *running) returned() (bool, error) {
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return true, err
	default:
		return false, nil
	}
}

// rows counts business rows, and keys that have more than one.
func (b *bed) rows(t *testing.T, consumer string) (rows, twice int) {
	t.Helper()
	err := b.pool.QueryRow(t.Context(), `SELECT count(*), count(*) - count(DISTINCT key) FROM business WHERE consumer = $1`, consumer).Scan(&rows, &twice)
	if err != nil {
		t.Fatal(err)
	}
	return rows, twice
}

func (b *bed) waitRows(t *testing.T, consumer string, n int) {
	t.Helper()
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%d business rows of %s", n, consumer), func() bool {
		got, _ := b.rows(t, consumer)
		return got >= n
	})
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// A batch holding the same key twice, and keys delivered again in a later
// batch, process each key once.
func TestDuplicatesInABatchAndAcrossBatchesAreProcessedOnce(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b := newBed(t, 1)
	b.produce(t, 1, 2, 3, 2, 4, 1, 5) // duplicates inside one poll
	reg := prometheus.NewRegistry()
	group := testenv.Name(t, "group")
	r := b.start(t, idempotent.Config{Group: group, Metrics: reg})
	b.waitRows(t, group, 5)
	b.produce(t, 3, 6, 5) // redelivered later
	b.waitRows(t, group, 6)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if rows, twice := b.rows(t, group); rows != 6 || twice != 0 {
		t.Errorf("%d business rows, %d keys twice; want 6 and 0", rows, twice)
	}
	if got := testenv.CounterValue(t, reg, "outboxd_consumer_duplicates_total"); got != 4 {
		t.Errorf("outboxd_consumer_duplicates_total = %v, want 4", got)
	}
	if got := testenv.CounterValue(t, reg, "outboxd_consumer_processed_total"); got != 6 {
		t.Errorf("outboxd_consumer_processed_total = %v, want 6", got)
	}
}

// Two consumers with one name handed the same records at once (two
// groups, so Kafka delivers every record to both: a forced redelivery)
// insert one business row per key between them.
func TestTwoConsumersHandedTheSameKeyAtOnceProcessItOnce(t *testing.T) {
	t.Parallel()
	b := newBed(t, 3)
	b.produce(t, seq(1, 300)...)
	name := testenv.Name(t, "svc")
	var inHandler atomic.Int64
	slow := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		inHandler.Add(1)
		time.Sleep(time.Millisecond) // widen the window in which both hold the key
		return insertBusiness(name)(ctx, tx, r)
	}
	r1 := b.start(t, idempotent.Config{Name: name, Handler: slow, BatchSize: 10})
	r2 := b.start(t, idempotent.Config{Name: name, Handler: slow, BatchSize: 10})
	b.waitRows(t, name, 300)
	time.Sleep(time.Second) // both groups read everything
	for _, r := range []*running{r1, r2} {
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	if rows, twice := b.rows(t, name); rows != 300 || twice != 0 {
		t.Errorf("%d business rows, %d keys processed twice; want 300 and 0", rows, twice)
	}
	if n := inHandler.Load(); n != 300 {
		t.Errorf("the handler ran %d times, want 300", n)
	}
}

// Two consumers with other names (two services) each process every record once.
func TestIndependentConsumersEachProcessEveryRecord(t *testing.T) {
	t.Parallel()
	b := newBed(t, 3)
	b.produce(t, seq(1, 100)...)
	a, c := testenv.Name(t, "a"), testenv.Name(t, "c")
	ra := b.start(t, idempotent.Config{Group: a})
	rc := b.start(t, idempotent.Config{Group: c})
	b.waitRows(t, a, 100)
	b.waitRows(t, c, 100)
	_, _ = ra.stop(t), rc.stop(t)
	for _, n := range []string{a, c} {
		if rows, twice := b.rows(t, n); rows != 100 || twice != 0 {
			t.Errorf("consumer %s: %d rows, %d twice; want 100 and 0", n, rows, twice)
		}
	}
}

// Two members of one group, the second joining mid-stream and the first
// leaving: a rebalance in the middle processes every record once.
func TestRebalanceInTheMiddleProcessesEveryRecordOnce(t *testing.T) {
	t.Parallel()
	b := newBed(t, 3)
	group := testenv.Name(t, "group")
	b.produce(t, seq(1, 500)...)
	slow := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		time.Sleep(100 * time.Microsecond)
		return insertBusiness(group)(ctx, tx, r)
	}
	r1 := b.start(t, idempotent.Config{Group: group, Handler: slow, BatchSize: 20})
	b.waitRows(t, group, 100)
	r2 := b.start(t, idempotent.Config{Group: group, Handler: slow, BatchSize: 20})
	b.produce(t, seq(501, 1000)...)
	b.waitRows(t, group, 600)
	if err := r1.stop(t); err != nil {
		t.Fatal(err)
	}
	r1.c.Close() // leaves the group: its partitions move to r2
	b.produce(t, seq(1001, 1500)...)
	b.waitRows(t, group, 1500)
	if err := r2.stop(t); err != nil {
		t.Fatal(err)
	}
	if rows, twice := b.rows(t, group); rows != 1500 || twice != 0 {
		t.Errorf("%d business rows, %d twice; want 1500 and 0", rows, twice)
	}
}

// A handler that keeps failing stops the consumer (the default), naming
// the record; nothing after it is committed. With a dead-letter topic the
// record goes there with headers saying why, its key is recorded, and the
// rest is processed.
func TestFailingRecordStopsOrIsDeadLettered(t *testing.T) {
	t.Parallel()
	failOn := func(bad string, name string) idempotent.Handler {
		return func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
			if id, _ := idempotent.IDHeader(r); id == bad {
				return errors.New("business rule refused it")
			}
			return insertBusiness(name)(ctx, tx, r)
		}
	}
	t.Run("stop", func(t *testing.T) {
		t.Parallel()
		b := newBed(t, 1)
		b.produce(t, seq(1, 10)...)
		group := testenv.Name(t, "group")
		reg := prometheus.NewRegistry()
		r := b.start(t, idempotent.Config{Group: group, Handler: failOn("5", group), MaxAttempts: 3, RetryInitial: time.Millisecond, RetryMax: time.Millisecond, Metrics: reg})
		err := r.wait(t)
		if err == nil || !strings.Contains(err.Error(), "offset 4") || !strings.Contains(err.Error(), "business rule refused it") {
			t.Fatalf("Run = %v, want the handler's error naming offset 4", err)
		}
		if rows, _ := b.rows(t, group); rows != 4 {
			t.Errorf("%d business rows, want the 4 before the failing record", rows)
		}
		if got := testenv.CounterValue(t, reg, "outboxd_consumer_retries_total"); got != 2 {
			t.Errorf("outboxd_consumer_retries_total = %v, want 2 (3 attempts)", got)
		}
	})
	t.Run("dead letter", func(t *testing.T) {
		t.Parallel()
		b := newBed(t, 1)
		dlq := testenv.Topic(t, 1)
		b.produce(t, seq(1, 10)...)
		group := testenv.Name(t, "group")
		r := b.start(t, idempotent.Config{Group: group, Handler: failOn("5", group), MaxAttempts: 2, RetryInitial: time.Millisecond, RetryMax: time.Millisecond, DeadLetterTopic: dlq})
		b.waitRows(t, group, 9)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		dl := consumeOne(t, b.brokers, dlq)
		if id, _ := idempotent.IDHeader(dl); id != "5" || header(dl, idempotent.HeaderError) == "" || header(dl, idempotent.HeaderTopic) != b.topic || header(dl, idempotent.HeaderOffset) != "4" {
			t.Errorf("dead letter %+v: want id 5 with error, topic and offset headers", dl.Headers)
		}
		var recorded bool
		if err := b.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM processed_keys WHERE consumer = $1 AND key = '5')`, group).Scan(&recorded); err != nil || !recorded {
			t.Errorf("the dead-lettered key is not recorded as processed (%v)", err)
		}
	})
}

// A panic in the handler rolls its transaction back, key included: the
// record is processed when tried again.
func TestPanicDoesNotCommitTheKey(t *testing.T) {
	t.Parallel()
	b := newBed(t, 1)
	b.produce(t, 1, 2, 3)
	group := testenv.Name(t, "group")
	var panicked atomic.Bool
	h := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		if err := insertBusiness(group)(ctx, tx, r); err != nil {
			return err
		}
		if id, _ := idempotent.IDHeader(r); id == "2" && panicked.CompareAndSwap(false, true) {
			panic("handler bug")
		}
		return nil
	}
	r := b.start(t, idempotent.Config{Group: group, Handler: h, RetryInitial: time.Millisecond})
	b.waitRows(t, group, 3)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if rows, twice := b.rows(t, group); rows != 3 || twice != 0 || !panicked.Load() {
		t.Errorf("%d rows, %d twice, panicked %v; want 3 rows once each after one panic", rows, twice, panicked.Load())
	}
}

// A record without a key is never processed silently: Run stops naming it.
func TestRecordWithoutKeyStops(t *testing.T) {
	t.Parallel()
	b := newBed(t, 1)
	b.produce(t, 1, -1, 2)
	group := testenv.Name(t, "group")
	r := b.start(t, idempotent.Config{Group: group})
	err := r.wait(t)
	if !errors.Is(err, idempotent.ErrNoKey) || !strings.Contains(err.Error(), "offset 1") {
		t.Fatalf("Run = %v, want ErrNoKey naming offset 1", err)
	}
	if rows, _ := b.rows(t, group); rows != 1 {
		t.Errorf("%d business rows, want the 1 before the keyless record", rows)
	}
}

func consumeOne(t *testing.T, brokers []string, topic string) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("nothing on %s", topic)
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// With outboxd's exactly-once mode the consumer reads with read_committed
// (KafkaOpts): records of an aborted Kafka transaction are never handed to
// the handler; committed ones are, once.
func TestReadCommittedSkipsAbortedTransactions(t *testing.T) {
	t.Parallel()
	b := newBed(t, 1)
	txnl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.TransactionalID(testenv.Name(t, "txn")), kgo.DefaultProduceTopic(b.topic))
	if err != nil {
		t.Fatal(err)
	}
	defer txnl.Close()
	ctx := t.Context()
	send := func(commit kgo.TransactionEndTry, ids ...int) {
		t.Helper()
		if err := txnl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			r := &kgo.Record{Value: []byte("{}"), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(strconv.Itoa(id))}}}
			if err := txnl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txnl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	send(kgo.TryCommit, 1, 2, 3)
	send(kgo.TryAbort, 4, 5)
	send(kgo.TryCommit, 6, 3) // 3 again: a re-produced event
	group := testenv.Name(t, "group")
	r := b.start(t, idempotent.Config{Group: group, KafkaOpts: []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}})
	b.waitRows(t, group, 4)
	time.Sleep(500 * time.Millisecond)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(ctx, `SELECT key FROM business WHERE consumer = $1 ORDER BY key`, group)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "1,2,3,6" {
		t.Errorf("processed %v, want 1,2,3,6 (4 and 5 aborted, 3 once)", keys)
	}
}

// Regression: a record alone in its batch was tried MaxAttempts + 1 times
// (the batch's try, then MaxAttempts alone), not the MaxAttempts the
// configuration promises.
func TestLoneRecordIsTriedMaxAttemptsTimes(t *testing.T) {
	t.Parallel()
	b := newBed(t, 1)
	b.produce(t, 1)
	var calls atomic.Int64
	h := func(context.Context, pgx.Tx, *kgo.Record) error { calls.Add(1); return errors.New("always") }
	r := b.start(t, idempotent.Config{Handler: h, MaxAttempts: 2, RetryInitial: time.Millisecond, RetryMax: time.Millisecond})
	if err := r.wait(t); err == nil {
		t.Fatal("Run = nil, want the handler's error")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the handler was called %d times, want MaxAttempts = 2", n)
	}
}

// Regression (issue 37, review): a refused record whose dead letter, with
// the headers saying why, was too large for the dead-letter topic stopped
// Run, and every start stopped again at it. Such a dead letter goes as a
// reference: the key, the dead-letter headers and the value's size.
func TestDeadLetterTooLargeGoesAsReference(t *testing.T) {
	t.Parallel()
	b := newBed(t, 1)
	dlq := testenv.Topic(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	big := bytes.Repeat([]byte("x"), 990_000) // fits the topic alone, not with a long error beside it
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: b.topic, Key: []byte("k"), Value: big,
		Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("1")}, {Key: "type", Value: []byte("Huge")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	b.produce(t, 2)
	group := testenv.Name(t, "group")
	refuse := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		if id, _ := idempotent.IDHeader(r); id == "1" {
			return errors.New("refused: " + strings.Repeat("why ", 5_000))
		}
		return insertBusiness(group)(ctx, tx, r)
	}
	r := b.start(t, idempotent.Config{Group: group, Handler: refuse, MaxAttempts: 1, DeadLetterTopic: dlq})
	b.waitRows(t, group, 1)
	if ok, err := r.returned(); ok {
		t.Fatalf("Run returned (%v) at a dead letter too large for its topic", err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	dl := consumeOne(t, b.brokers, dlq)
	if id, _ := idempotent.IDHeader(dl); id != "1" || dl.Value != nil || header(dl, idempotent.HeaderValueBytes) != "990000" ||
		header(dl, idempotent.HeaderOffset) != "0" || header(dl, "type") != "" || len(header(dl, idempotent.HeaderError)) > 5<<10 {
		t.Errorf("dead letter: value %d bytes, headers %v; want a reference: id 1, no value, its size, the dead-letter headers, the error cut short", len(dl.Value), headerKeys(dl))
	}
}

func headerKeys(r *kgo.Record) []string {
	var ks []string
	for _, h := range r.Headers {
		ks = append(ks, h.Key)
	}
	return ks
}
