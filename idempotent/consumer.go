package idempotent

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Consumer processes a consumer group's records once each. Run it once;
// Close it after Run returned.
type Consumer struct {
	cfg     Config
	pool    *pgxpool.Pool
	cl      *kgo.Client
	store   Store
	metrics *metrics
}

// New returns a Consumer of the group whose handler writes through pool.
// It creates processed_keys and today's partitions when missing (the role
// needs CREATE for that once; see Store).
func New(ctx context.Context, cfg Config, pool *pgxpool.Pool) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("idempotent: no database pool")
	}
	m, err := newMetrics(cfg.Metrics, cfg.Name)
	if err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, pool: pool, store: NewStore(cfg.Table), metrics: m}
	if err := c.store.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	if _, err := c.store.Maintain(ctx, pool, time.Now(), cfg.TTL, partitionsAhead); err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // a new group reads everything
		kgo.DisableAutoCommit(),                           // offsets only after the database commit
		kgo.BlockRebalanceOnPoll(),                        // no partition is revoked while a batch is in hand
		kgo.RequiredAcks(kgo.AllISRAcks()),                // dead letters
	}, cfg.KafkaOpts...)
	if c.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("idempotent: creating the Kafka client: %w", err)
	}
	return c, nil
}

// Close leaves the group and closes the client.
func (c *Consumer) Close() { c.cl.CloseAllowingRebalance() }

// Run consumes until ctx ends (it finishes the batch in hand, commits its
// offsets and returns nil) or a record cannot be processed and there is no
// dead-letter topic (it returns that error; nothing after the record is
// committed, so the next Run starts with it). It also maintains
// processed_keys' partitions every MaintenanceInterval.
func (c *Consumer) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	if c.cfg.MaintenanceInterval > 0 {
		g.Go(func() error { c.maintain(gctx); return nil })
	}
	g.Go(func() error { return c.consume(gctx) })
	return g.Wait()
}

func (c *Consumer) consume(ctx context.Context) error {
	c.cfg.Log.Info("consuming", "consumer", c.cfg.Name, "group", c.cfg.Group, "topics", c.cfg.Topics)
	for {
		fs := c.cl.PollFetches(ctx)
		if fs.IsClientClosed() || ctx.Err() != nil && fs.NumRecords() == 0 {
			c.cl.AllowRebalance()
			return nil
		}
		fs.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				c.cfg.Log.Warn("fetching; retrying", "topic", topic, "partition", partition, "err", err)
			}
		})
		// The batch in hand is finished even when ctx ended meanwhile.
		wctx := context.WithoutCancel(ctx)
		recs := fs.Records()
		for len(recs) > 0 {
			n := min(len(recs), c.cfg.BatchSize)
			if err := c.process(wctx, recs[:n]); err != nil {
				c.cl.AllowRebalance()
				return err
			}
			if err := c.cl.CommitRecords(wctx, recs[:n]...); err != nil {
				// Processed and recorded: a redelivery is skipped.
				c.cfg.Log.Warn("committing offsets; the records will be delivered again and skipped", "consumer", c.cfg.Name, "err", err)
			}
			recs = recs[n:]
		}
		c.cl.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// process handles one batch in one transaction. When it fails, the batch
// is rolled back and its records are tried one at a time, each with its
// retries, so one bad record costs the others nothing and order is kept.
// A lone record goes straight to those tries: MaxAttempts in all.
func (c *Consumer) process(ctx context.Context, recs []*kgo.Record) error {
	if len(recs) == 1 {
		return c.one(ctx, recs[0])
	}
	err := c.transaction(ctx, recs)
	if err == nil {
		return nil
	}
	c.cfg.Log.Debug("batch failed; processing its records one by one", "consumer", c.cfg.Name, "records", len(recs), "err", err)
	for _, r := range recs {
		if err := c.one(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// one processes one record, retrying with backoff up to MaxAttempts.
func (c *Consumer) one(ctx context.Context, r *kgo.Record) error {
	bo := backoff.WithMaxRetries(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(c.cfg.RetryInitial), backoff.WithMaxInterval(c.cfg.RetryMax), backoff.WithMaxElapsedTime(0)),
		uint64(c.cfg.MaxAttempts-1))
	attempt := 0
	err := backoff.Retry(func() error {
		attempt++
		err := c.transaction(ctx, []*kgo.Record{r})
		var ke *keyError
		if errors.As(err, &ke) {
			return backoff.Permanent(err) // retrying cannot find a key
		}
		if err != nil && attempt < c.cfg.MaxAttempts {
			c.metrics.retries.Inc()
			c.cfg.Log.Warn("processing a record failed; retrying", "consumer", c.cfg.Name, "topic", r.Topic, "partition", r.Partition,
				"offset", r.Offset, "attempt", attempt, "err", err)
		}
		return err
	}, backoff.WithContext(bo, ctx))
	if err == nil {
		return nil
	}
	if c.cfg.DeadLetterTopic == "" {
		return fmt.Errorf("processing %s[%d] offset %d (consumer %s): %w", r.Topic, r.Partition, r.Offset, c.cfg.Name, err)
	}
	return c.deadLetter(ctx, r, err)
}

// keyError: the record has no key.
type keyError struct{ err error }

func (e *keyError) Error() string { return e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// transaction records the keys of recs and runs the handler for each one
// whose key was new, all in one transaction.
func (c *Consumer) transaction(ctx context.Context, recs []*kgo.Record) error {
	keys := make([]string, len(recs))
	for i, r := range recs {
		k, err := c.cfg.Key(r)
		if err != nil {
			return &keyError{err: err}
		}
		keys[i] = k
	}
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("starting a transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
	fresh, err := c.store.claim(ctx, tx, c.cfg.Name, keys)
	if err != nil {
		return err
	}
	var processed, duplicates int
	for i, r := range recs {
		if !fresh[keys[i]] {
			duplicates++
			continue
		}
		delete(fresh, keys[i]) // a later record with the same key is a duplicate
		start := time.Now()
		err := c.handle(ctx, tx, r)
		c.metrics.handlerSeconds.Observe(time.Since(start).Seconds())
		if err != nil {
			return fmt.Errorf("handler, key %q: %w", keys[i], err)
		}
		processed++
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	c.metrics.processed.Add(float64(processed))
	c.metrics.duplicates.Add(float64(duplicates))
	return nil
}

// handle calls the handler, turning a panic into an error.
func (c *Consumer) handle(ctx context.Context, tx pgx.Tx, r *kgo.Record) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return c.cfg.Handler(ctx, tx, r)
}

// maintain keeps the partitions until ctx ends.
func (c *Consumer) maintain(ctx context.Context) {
	t := time.NewTicker(c.cfg.MaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m, err := c.store.Maintain(ctx, c.pool, time.Now(), c.cfg.TTL, partitionsAhead)
		if err != nil {
			c.cfg.Log.Warn("maintaining processed keys; retrying at the next interval", "consumer", c.cfg.Name, "err", err)
			continue
		}
		if len(m.Dropped) > 0 {
			c.cfg.Log.Info("dropped expired processed-keys partitions", "consumer", c.cfg.Name, "partitions", m.Dropped)
		}
	}
}
