package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/idempotent"
)

// sourceOf is the outboxd.source header of the records of table (or
// "message:<prefix>") in pool's database: system identifier/database/table.
func sourceOf(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(t.Context(), `SELECT system_identifier::text || '/' || current_database() || '/' || $1 FROM pg_catalog.pg_control_system()`, table).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Regression test for issue 37, item 3, end to end: two databases whose
// outbox tables hand out the same bigserial ids, each published by an
// outboxd of its own into one topic, one consumer built with package
// idempotent: every event is processed once, and a replay of the topic
// processes none again. (Keyed by the id alone, each id's second event was
// skipped as a duplicate of the first: half the events lost.)
func TestTwoDatabasesFeedingOneConsumerProcessEveryEventOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w1 := newWorld(t)
	w2 := migratedWorld(t, testenv.Database(t))
	w2.topic = w1.topic
	ids1, ids2 := w1.write(t, 10, 0), w2.write(t, 10, 1000)
	if ids1[0] != ids2[0] || len(ids1) != len(ids2) {
		t.Fatalf("ids %v and %v: the test needs the same ids in both databases", ids1, ids2)
	}
	w1.start(t)
	w2.start(t)
	if _, err := w1.pool.Exec(ctx, `CREATE TABLE shipments (source text NOT NULL, outbox_id bigint NOT NULL, payload jsonb NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t, "svc")
	consume := func(group string, want int) {
		t.Helper()
		reg := prometheus.NewRegistry()
		c, err := idempotent.New(ctx, idempotent.Config{Brokers: strings.Split(w1.brokers, ","), Group: group, Name: name, Topics: []string{w1.topic}, Metrics: reg,
			Handler: func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
				id, _ := idempotent.IDHeader(r)
				_, err := tx.Exec(ctx, `INSERT INTO shipments (source, outbox_id, payload) VALUES ($1, $2, $3)`, recordHeader(r, idempotent.SourceHeader), id, string(r.Value))
				return err
			}}, w1.pool)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		waitFor(t, 2*time.Minute, "every record in the topic consumed", func() bool {
			return testenv.CounterValue(t, reg, "outboxd_consumer_processed_total")+testenv.CounterValue(t, reg, "outboxd_consumer_duplicates_total") >= float64(want)
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	total := len(ids1) + len(ids2)
	waitFor(t, 2*time.Minute, "both outboxd published everything", func() bool { return topicRecords(t, w1) >= total })
	consume(testenv.Name(t, "group"), topicRecords(t, w1))
	consume(testenv.Name(t, "replay"), topicRecords(t, w1)) // another group, the same consumer: all duplicates
	var rows, events, sources int
	if err := w1.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (source, outbox_id)), count(DISTINCT source) FROM shipments`).Scan(&rows, &events, &sources); err != nil {
		t.Fatal(err)
	}
	if rows != total || events != total || sources != 2 {
		t.Errorf("%d business rows, %d distinct events of %d sources; want %d events of 2 sources, each once", rows, events, sources, total)
	}
}
