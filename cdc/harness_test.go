package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/slot"
)

// bed is one test's database (migrated, with its slot), topic and broker.
type bed struct {
	t       *testing.T
	url     string
	brokers []string
	topic   string
	pool    *pgxpool.Pool
	slot    string
	log     *slog.Logger
}

// recreateOn gives the bed the same database (by name), schema, slot and
// table "other" on another server, for tests that replace the server
// behind an address. The database appears under its name only once it is
// complete, so a streamer retrying meanwhile never sees it half made.
func (b *bed) recreateOn(t *testing.T, adminURL string) {
	t.Helper()
	ctx := t.Context()
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{"tmp_" + name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	final := b.url
	u.Path = "/tmp_" + name
	b.url = u.String()
	b.prepareDatabase(t)
	b.pool.Close()
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{"tmp_" + name}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	b.url = final
	if b.pool, err = pgxpool.New(ctx, final); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.pool.Close)
}

func newBed(t *testing.T, dbAdminURL string, brokers []string) *bed {
	t.Helper()
	var url string
	if dbAdminURL == "" {
		url = testenv.Database(t)
	} else {
		url = testenv.DatabaseOn(t, dbAdminURL)
	}
	if brokers == nil {
		brokers = testenv.Brokers(t)
	}
	// Slots are cluster-wide: each test needs its own name.
	b := &bed{t: t, url: url, brokers: brokers, slot: testenv.Name(t, "slot"), log: testLogger(t)}
	b.topic = testenv.CreateTopic(t, brokers, testenv.Name(t, "topic"), 3)
	b.prepareDatabase(t)
	return b
}

// prepareDatabase migrates the bed's database, creates its slot and the
// table "other", and opens the pool.
func (b *bed) prepareDatabase(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	url := b.url
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := migrations.Apply(ctx, conn, migrations.Target{Table: "public.outbox", Publication: "outboxd"}, b.log); err != nil {
		t.Fatal(err)
	}
	if _, err := slot.Create(ctx, conn, b.slot, false); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE other (id bigserial PRIMARY KEY, note text)`); err != nil {
		t.Fatal(err)
	}
	b.pool, err = pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.pool.Close)
}

// testLogger writes debug logs to stderr when OUTBOXD_TEST_LOG is set, and
// nowhere otherwise.
func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("OUTBOXD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// runner is a Streamer running in the background, with its pump beside
// it as package pipeline runs them.
type runner struct {
	cancel context.CancelFunc
	done   chan error
	st     *cdc.Streamer
	pump   *pump.Pump
}

// start runs the pipeline (streamer, pump, producer) against the bed
// until stopped.
func (b *bed) start(cfg cdc.Config, brokers ...string) *runner {
	b.t.Helper()
	return b.startWith(cfg, pump.Config{}, publish.Config{Brokers: brokers})
}

// startWith is start with the pump's and the producer's configuration too.
func (b *bed) startWith(cfg cdc.Config, pcfg pump.Config, kcfg publish.Config) *runner {
	b.t.Helper()
	if kcfg.Brokers == nil {
		kcfg.Brokers = b.brokers
	}
	pub, err := publish.New(kcfg, b.log)
	if err != nil {
		b.t.Fatal(err)
	}
	cfg.DatabaseURL = b.url
	cfg.Slot = b.slot
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 200 * time.Millisecond
	}
	cfg.TolerateUnusableTables = pcfg.DeadLetterTopic != ""
	p, err := pump.New(pcfg, pub, b.log)
	if err != nil {
		b.t.Fatal(err)
	}
	st, err := cdc.New(cfg, p, p, b.log)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan error, 1), st: st, pump: p}
	go func() {
		defer pub.Close()
		r.done <- runStages(ctx, st, p)
	}()
	b.t.Cleanup(func() { _ = r.stop() })
	return r
}

// runStages runs the stream and its pump as package pipeline does: the
// pump outlives the stream's drain, and its failure stops the stream and
// is the error.
func runStages(ctx context.Context, st *cdc.Streamer, p *pump.Pump) error {
	g, gctx := errgroup.WithContext(ctx)
	pumpCtx, stopPump := context.WithCancel(context.WithoutCancel(gctx))
	defer stopPump()
	g.Go(func() error { return p.Run(pumpCtx) })
	g.Go(func() error {
		defer stopPump()
		return st.Run(gctx)
	})
	return g.Wait()
}

// stop cancels (as SIGTERM does) and waits for Run's result.
func (r *runner) stop() error {
	r.cancel()
	return r.wait(time.Minute)
}

func (r *runner) wait(d time.Duration) error {
	select {
	case err, ok := <-r.done:
		if !ok {
			return nil
		}
		close(r.done)
		return err
	case <-time.After(d):
		return errors.New("streamer did not return")
	}
}

// row is one outbox row to insert.
type row struct {
	agg     string // uuid
	topic   string
	payload string
	headers string // JSON object or ""
}

// insert writes rows in one transaction, committed or rolled back, and
// returns their ids.
func (b *bed) insert(ctx context.Context, rows []row, commit bool, alsoOther bool) ([]int64, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background())
	ids := make([]int64, len(rows))
	for i, r := range rows {
		var headers any
		if r.headers != "" {
			headers = r.headers
		}
		if err := tx.QueryRow(ctx, `INSERT INTO outbox (aggregate_id, topic, payload, headers) VALUES ($1, $2, $3, $4) RETURNING id`,
			r.agg, r.topic, r.payload, headers).Scan(&ids[i]); err != nil {
			return nil, err
		}
	}
	if alsoOther {
		if _, err := tx.Exec(ctx, `INSERT INTO other (note) VALUES ('not an event')`); err != nil {
			return nil, err
		}
	}
	if !commit {
		return ids, tx.Rollback(ctx)
	}
	return ids, tx.Commit(ctx)
}

// consumer reads a topic from the start.
type consumer struct {
	cl   *kgo.Client
	recs []*kgo.Record
}

func (b *bed) consume(brokers ...string) *consumer {
	b.t.Helper()
	if brokers == nil {
		brokers = b.brokers
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(b.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(cl.Close)
	return &consumer{cl: cl}
}

// until polls until n records arrived (or d passed) and returns them all.
func (c *consumer) until(t *testing.T, n int, d time.Duration) []*kgo.Record {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(c.recs) < n && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		fs := c.cl.PollFetches(ctx)
		cancel()
		c.recs = append(c.recs, fs.Records()...)
	}
	if len(c.recs) < n {
		t.Fatalf("consumed %d records within %s, want %d", len(c.recs), d, n)
	}
	return c.recs
}

// untilIDs polls until every id in want arrived (or d passed) and returns
// all records.
func (c *consumer) untilIDs(t *testing.T, want []int64, d time.Duration) []*kgo.Record {
	t.Helper()
	deadline := time.Now().Add(d)
	got := map[int64]bool{}
	missing := func() []int64 {
		for _, r := range c.recs {
			got[recordID(t, r)] = true
		}
		var m []int64
		for _, id := range want {
			if !got[id] {
				m = append(m, id)
			}
		}
		return m
	}
	for len(missing()) > 0 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		fs := c.cl.PollFetches(ctx)
		cancel()
		c.recs = append(c.recs, fs.Records()...)
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("%d of %d outbox ids not published within %s: %v", len(m), len(want), d, m[:min(len(m), 20)])
	}
	return c.recs
}

// settle polls a little longer to catch records beyond the expected count.
func (c *consumer) settle(t *testing.T, d time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	for ctx.Err() == nil {
		c.recs = append(c.recs, c.cl.PollFetches(ctx).Records()...)
	}
	return c.recs
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func recordID(t *testing.T, r *kgo.Record) int64 {
	t.Helper()
	v, ok := header(r, "id")
	if !ok {
		t.Fatalf("record at %s/%d/%d has no id header", r.Topic, r.Partition, r.Offset)
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("id header %q: %v", v, err)
	}
	return id
}

// confirmed reads the slot's confirmed_flush_lsn.
func (b *bed) confirmed(t *testing.T) outbox.LSN {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(t.Context(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, b.slot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := outbox.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func (b *bed) currentLSN(t *testing.T) outbox.LSN {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(t.Context(), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := outbox.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func uuidFor(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// slotHolds reports whether the (inactive) slot would still send the
// transaction that inserted the outbox row: peeking does not consume.
func (b *bed) slotHolds(t *testing.T, outboxID int64) bool {
	t.Helper()
	var holds bool
	var err error
	for range 50 { // the stopped walsender may still be releasing the slot
		err = b.pool.QueryRow(t.Context(), `SELECT EXISTS (
			SELECT 1 FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', 'outboxd')
			WHERE xid = (SELECT xmin::text::xid FROM outbox WHERE id = $2))`, b.slot, outboxID).Scan(&holds)
		if err == nil || !strings.Contains(err.Error(), "is active") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("peeking slot %s: %v", b.slot, err)
	}
	return holds
}
