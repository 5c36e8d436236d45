// Package relay is the polling outbox relay that outboxd replaces, written
// for the benchmarks the way the seed articles describe it: N workers each
// claim a batch of unpublished rows with SELECT ... FOR UPDATE SKIP LOCKED,
// produce them to Kafka, mark them published and commit. It is tuned fairly
// (batched claims, an idempotent producer that pipelines a whole batch,
// a partial index on unpublished rows) but it is what it is: every event
// costs an UPDATE (WAL and a dead tuple) and waits for a poll.
package relay

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Schema creates the relay's table: the outbox plus published_at.
const Schema = `CREATE TABLE IF NOT EXISTS outbox_relay (
    id           bigserial   PRIMARY KEY,
    aggregate_id uuid        NOT NULL,
    topic        text        NOT NULL,
    payload      jsonb       NOT NULL,
    headers      jsonb       NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz NULL
);
CREATE INDEX IF NOT EXISTS outbox_relay_unpublished ON outbox_relay (id) WHERE published_at IS NULL;`

// Config tunes the relay.
type Config struct {
	Workers      int           // concurrent claimers (default 4)
	BatchSize    int           // rows per claim (default 500)
	PollInterval time.Duration // wait after an empty claim (default 100ms)
	Drain        bool          // return once a claim finds nothing instead of polling
}

// Run relays until ctx ends (or, with Drain, the table has nothing unpublished).
func Run(ctx context.Context, pool *pgxpool.Pool, cl *kgo.Client, cfg Config) (published int64, err error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	counts := make([]int64, cfg.Workers)
	g, gctx := errgroup.WithContext(ctx)
	for w := range cfg.Workers {
		g.Go(func() error {
			for gctx.Err() == nil {
				// A claim started runs to its end: stopping the relay
				// never leaves a batch produced but not marked published
				// (which would be published again), so a cutover after it
				// repeats nothing.
				n, err := claim(context.WithoutCancel(gctx), pool, cl, cfg.BatchSize)
				if err != nil {
					if gctx.Err() != nil {
						return nil
					}
					return err
				}
				counts[w] += int64(n)
				if n == 0 {
					if cfg.Drain {
						return nil
					}
					select {
					case <-gctx.Done():
					case <-time.After(cfg.PollInterval):
					}
				}
			}
			return nil
		})
	}
	err = g.Wait()
	for _, c := range counts {
		published += c
	}
	return published, err
}

// claim publishes one batch in one transaction.
func claim(ctx context.Context, pool *pgxpool.Pool, cl *kgo.Client, n int) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `SELECT id, aggregate_id::text, topic, payload::text, created_at FROM outbox_relay
		WHERE published_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, n)
	if err != nil {
		return 0, err
	}
	var ids []int64
	var recs []*kgo.Record
	for rows.Next() {
		var id int64
		var key, topic, payload string
		var created time.Time
		if err := rows.Scan(&id, &key, &topic, &payload, &created); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(payload), Timestamp: created,
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(strconv.FormatInt(id, 10))}}})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, tx.Commit(ctx)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("producing: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE outbox_relay SET published_at = now() WHERE id = ANY($1)`, ids); err != nil {
		return 0, err
	}
	return len(ids), tx.Commit(ctx)
}
