package idempotent

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// Run consumes until ctx ends or a record cannot be processed.
//
// When ctx ends, Run finishes the batch in hand, commits its offsets and
// returns nil. A transient failure (see Config.MaxAttempts: the database
// restarting, a connection lost, Kafka unreachable) is retried with
// backoff for as long as ctx lasts; if ctx ends while one is being
// retried, or before a record of the batch is dead-lettered, Run stops
// there, logs that at Warn and returns nil: the records from that one on
// are not committed, so the next Run starts with them.
//
// A record cannot be processed when its handler refused it MaxAttempts
// times or it has no key: without a dead-letter topic Run returns that
// error (nothing after the record is committed, so the next Run starts
// with it); with one the record is dead-lettered and Run goes on. A
// permanent failure outside the handler (processed_keys missing, a
// permission denied) is never the record's fault: Run returns it, with or
// without a dead-letter topic.
//
// Run also maintains processed_keys' partitions every MaintenanceInterval.
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
		// The batch in hand is finished even when ctx ended meanwhile
		// (wctx), unless a transient failure stands in the way (ctx).
		wctx := context.WithoutCancel(ctx)
		recs := fs.Records()
		for len(recs) > 0 {
			n := min(len(recs), c.cfg.BatchSize)
			if err := c.process(ctx, wctx, recs[:n]); err != nil {
				c.cl.AllowRebalance()
				var stopped *stoppedError
				if errors.As(err, &stopped) {
					c.cfg.Log.Warn("stopping with records unprocessed; the next run starts with them", "consumer", c.cfg.Name,
						"topic", recs[0].Topic, "partition", recs[0].Partition, "offset", recs[0].Offset, "err", stopped.err)
					return nil
				}
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

// process handles one batch in one transaction, retrying transient
// failures. When it fails otherwise, the batch is rolled back and its
// records are tried one at a time, each with its retries, so one bad
// record costs the others nothing and order is kept. A lone record goes
// straight to those tries: MaxAttempts in all.
//
// ctx is Run's; wctx is ctx without its end, under which the batch in
// hand is finished (see retryTransient).
func (c *Consumer) process(ctx, wctx context.Context, recs []*kgo.Record) error {
	if len(recs) == 1 {
		return c.one(ctx, wctx, recs[0])
	}
	err := c.retryTransient(ctx, wctx, "processing a batch", recs, c.newBackOff(), func(tctx context.Context) error {
		return c.transaction(tctx, recs)
	})
	var stopped *stoppedError
	if err == nil || errors.As(err, &stopped) {
		return err
	}
	c.cfg.Log.Debug("batch failed; processing its records one by one", "consumer", c.cfg.Name, "records", len(recs), "err", err)
	for _, r := range recs {
		if err := c.one(ctx, wctx, r); err != nil {
			return err
		}
	}
	return nil
}

// one processes one record. Transient failures are retried without
// counting (retryTransient); a refusal by the handler (an error it
// returned that is not transient, or a panic) is retried with backoff up
// to MaxAttempts in all. Then, and for a record without a key, the
// record is refused (see refuse).
func (c *Consumer) one(ctx, wctx context.Context, r *kgo.Record) error {
	bo := c.newBackOff()
	recs := []*kgo.Record{r}
	for attempt := 1; ; attempt++ {
		err := c.retryTransient(ctx, wctx, "processing a record", recs, bo, func(tctx context.Context) error {
			return c.transaction(tctx, recs)
		})
		var stopped *stoppedError
		var refused *handlerError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &stopped):
			return err
		case !errors.As(err, &refused), attempt >= c.cfg.MaxAttempts:
			return c.refuse(ctx, wctx, r, err)
		}
		wait := bo.NextBackOff()
		c.metrics.retries.Inc()
		c.cfg.Log.Warn("the handler refused a record; retrying", "consumer", c.cfg.Name, "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "attempt", attempt, "max_attempts", c.cfg.MaxAttempts, "retry_in", wait, "err", err)
		time.Sleep(wait) // under wctx: the batch in hand is finished
	}
}

// refuse ends a record that cannot be processed. A record the handler
// refused, or without a key, is dead-lettered when there is a dead-letter
// topic; otherwise, and for a permanent failure outside the handler
// (never the record's fault), the error is returned and Run stops.
func (c *Consumer) refuse(ctx, wctx context.Context, r *kgo.Record, err error) error {
	var refused *handlerError
	var ke *keyError
	if c.cfg.DeadLetterTopic != "" && (errors.As(err, &refused) || errors.As(err, &ke)) {
		return c.deadLetter(ctx, wctx, r, err)
	}
	return fmt.Errorf("processing %s[%d] offset %d (consumer %s): %w", r.Topic, r.Partition, r.Offset, c.cfg.Name, err)
}

// retryTransient calls op until it succeeds or fails with an error that is
// not transient, which it returns. After a transient failure it logs it
// at Warn, waits bo's next interval and calls op again. The first call
// gets wctx, so the batch in hand is finished after ctx ended; a retry
// gets ctx, and when ctx has ended retryTransient gives up with a
// *stoppedError: a failure that outlasts Run's context is not the
// record's fault, and ends nothing but the retries.
func (c *Consumer) retryTransient(ctx, wctx context.Context, step string, recs []*kgo.Record, bo backoff.BackOff,
	op func(context.Context) error) error {
	for retrying := false; ; retrying = true {
		octx := wctx
		if retrying {
			octx = ctx
		}
		err := op(octx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil && (retrying || transient(err) || errors.Is(err, ctx.Err())):
			return &stoppedError{err: err}
		case !transient(err):
			return err
		}
		wait := bo.NextBackOff()
		c.metrics.retries.Inc()
		c.cfg.Log.Warn("retrying after a transient failure", "consumer", c.cfg.Name, "step", step, "topic", recs[0].Topic,
			"partition", recs[0].Partition, "offset", recs[0].Offset, "records", len(recs), "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return &stoppedError{err: err}
		case <-t.C:
		}
	}
}

// newBackOff returns the exponential backoff of one record's or batch's
// retries: RetryInitial to RetryMax, without an end of its own.
func (c *Consumer) newBackOff() backoff.BackOff {
	return backoff.NewExponentialBackOff(backoff.WithInitialInterval(c.cfg.RetryInitial),
		backoff.WithMaxInterval(c.cfg.RetryMax), backoff.WithMaxElapsedTime(0))
}

// keyError: the record has no key.
type keyError struct{ err error }

func (e *keyError) Error() string { return e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// handlerError: the handler returned an error (or panicked) for a key.
type handlerError struct {
	key string
	err error
}

func (e *handlerError) Error() string { return fmt.Sprintf("handling key %q: %v", e.key, e.err) }
func (e *handlerError) Unwrap() error { return e.err }

// begin begins a READ COMMITTED transaction, whatever the server's or the
// database's default_transaction_isolation. claim depends on it: under
// REPEATABLE READ or SERIALIZABLE the snapshot is taken by the first
// statement, the advisory lock's, before the lock is granted, so the
// insert that follows would not see a key that another consumer holding
// the lock committed meanwhile, and it could not conflict with that row
// either (processed_at, part of the primary key, differs): both would
// run the handler. The handler's statements run READ COMMITTED too.
//
// A pooled connection the server had closed fails with an EOF: that is a
// *connLostError.
func (c *Consumer) begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = &connLostError{err: err}
	}
	return tx, err
}

// lostOn returns err as a *connLostError when tx's connection is closed
// after it: whatever err says, the connection, and tx, were lost.
func lostOn(tx pgx.Tx, err error) error {
	if tx.Conn().IsClosed() {
		return &connLostError{err: err}
	}
	return err
}

// transaction records the keys of recs and runs the handler for each one
// whose key was new, all in one transaction. A failure after which the
// transaction's connection is closed is a *connLostError.
func (c *Consumer) transaction(ctx context.Context, recs []*kgo.Record) error {
	keys := make([]string, len(recs))
	var legacy []string // per key, its record's bare id from before the upgrade to keys with a source (Config.NoLegacyKeys)
	for i, r := range recs {
		k, err := c.cfg.Key(r)
		if err != nil {
			return &keyError{err: err}
		}
		keys[i] = k
		if c.cfg.NoLegacyKeys {
			continue
		}
		if id := legacyKey(r, k); id != "" {
			if legacy == nil {
				legacy = make([]string, len(recs))
			}
			legacy[i] = id
		}
	}
	tx, err := c.begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning the transaction for %s: %w", describeKeys(keys), err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
	fresh, err := c.store.claim(ctx, tx, c.cfg.Name, keys, legacy)
	if err != nil {
		return lostOn(tx, err)
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
			return lostOn(tx, &handlerError{key: keys[i], err: err})
		}
		processed++
	}
	if err := tx.Commit(ctx); err != nil {
		return lostOn(tx, fmt.Errorf("committing the transaction for %s: %w", describeKeys(keys), err))
	}
	c.metrics.processed.Add(float64(processed))
	c.metrics.duplicates.Add(float64(duplicates))
	return nil
}

// describeKeys names the keys of a transaction in an error.
func describeKeys(keys []string) string {
	if len(keys) == 1 {
		return fmt.Sprintf("key %q", keys[0])
	}
	return fmt.Sprintf("%d keys (%q to %q)", len(keys), keys[0], keys[len(keys)-1])
}

// handle calls the handler, turning a panic into an error.
func (c *Consumer) handle(ctx context.Context, tx pgx.Tx, r *kgo.Record) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	if d := c.cfg.Decoder; d != nil {
		if r, err = d.Record(ctx, r); err != nil {
			return err
		}
	}
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
