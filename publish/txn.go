package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/outbox"
)

// TxnProducer is the exactly-once sink of package pump: it groups
// PostgreSQL transactions into Kafka transactions and writes, in each, a
// progress record naming the last event it holds.
//
// Guarantees, for consumers reading with isolation.level=read_committed:
//   - An event's done callback gets nil only once the Kafka transaction
//     holding it committed, so the slot is confirmed only behind the
//     progress topic, never ahead of it.
//   - After any restart or takeover, the producer first fences every
//     earlier holder of its transactional id (their open transactions are
//     aborted and they cannot commit again), then reads the progress topic
//     to its end, then skips every event at or before the position it
//     holds: each event is in exactly one committed transaction.
//   - A record Kafka refuses for good aborts its whole transaction: none of
//     its records is visible, and they all fail with an error matching
//     outbox.ErrTransactionAborted (so the pump stops rather than
//     dead-lettering records that did nothing wrong).
//
// Publish is safe from any goroutine and never blocks; Run owns the Kafka
// client and must run for as long as records are published.
type TxnProducer struct {
	cfg      TxnConfig
	kafka    Config
	slot     string
	identify func(context.Context) (Server, error)
	log      *slog.Logger
	admin    *kgo.Client // not transactional: topic, progress, ping
	hangs    *hangWatch

	mu      sync.Mutex
	queue   []txnItem
	failErr error // once set, Publish fails at once
	wake    chan struct{}
	abort   chan struct{}
	stopped chan struct{}
	// renew: a new stream started (Renew); the producer is prepared
	// again before its next transaction.
	renew atomic.Bool

	// Only Run's goroutine touches these.
	cl        *kgo.Client // transactional; nil until init
	txnID     string      // its transactional id
	key       []byte
	committed outbox.Position // the last position of a committed transaction
	last      outbox.Position // the last position handed to Kafka
	inTxn     bool
	producer  producerID // Kafka's producer id and epoch for txnID, as last seen
	open      []txnItem  // the records of the open transaction
	openBytes int
	openSince time.Time
	// commitTook is what commits have taken lately (a moving average):
	// a transaction's commit starts that much before its interval ends.
	commitTook time.Duration
	txnAgain   int // transactions refused in a row (abortOpen)

	recMu  sync.Mutex
	recErr error // the first record of the open transaction that failed

	dataLoss                  *dataLossCounter
	commits, retried, skipped atomic.Uint64
}

// producerID is a producer id and its epoch. Under Kafka's transaction
// protocol version 2 every commit bumps the epoch, and once it runs out
// (32,767 commits) the coordinator hands the transactional id a new
// producer id.
type producerID struct {
	id    int64
	epoch int16
}

type txnItem struct {
	ev   *outbox.Event
	done func(error)
}

// Server is the PostgreSQL server the records come from, as the
// replication connection that reads them identified it.
type Server struct {
	SystemID string
	Timeline int32
	// WALEnd is the server's WAL end when it was identified (0: unknown,
	// or no bound: a standby that restarted replays its WAL again, and its
	// WAL end trails what was committed to Kafka from it).
	// Progress past it belongs to a history the server no longer has.
	WALEnd outbox.LSN
}

// NewTxn creates the exactly-once sink for slot. identify returns the
// PostgreSQL server's system identifier and timeline; it is called once
// Run has work, and the default transactional id (system identifier) and
// the progress key (both) are derived from it. Nothing contacts Kafka
// before Run.
func NewTxn(cfg TxnConfig, kafka Config, slot string, identify func(context.Context) (Server, error), log *slog.Logger) (*TxnProducer, error) {
	if err := errors.Join(kafka.Validate(), cfg.Validate()); err != nil {
		return nil, fmt.Errorf("creating the transactional Kafka producer: %w", err)
	}
	cfg = cfg.WithDefaults()
	kafka, err := kafka.WithDefaults().secured(log)
	if err != nil {
		return nil, fmt.Errorf("creating the transactional Kafka producer: %w", err)
	}
	t := &TxnProducer{cfg: cfg, kafka: kafka, slot: slot, identify: identify, log: log,
		wake: make(chan struct{}, 1), abort: make(chan struct{}, 1), stopped: make(chan struct{})}
	t.dataLoss = &dataLossCounter{log: log}
	t.hangs = newHangWatch(cfg.ProgressTopic, cfg.Timeout, kafka.Brokers[0], log)
	admin, err := kgo.NewClient(clientOpts(kafka, log, t.dataLoss.detected)...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	t.admin = admin
	return t, nil
}

// Publish queues ev for the next Kafka transaction. A record too large for
// Config.MaxRecordBytes is refused before Publish returns, as in Producer.
func (t *TxnProducer) Publish(ev *outbox.Event, done func(error)) {
	if err := tooLarge(ev, t.kafka.MaxRecordBytes, t.kafka.Names); err != nil {
		done(err)
		return
	}
	if ev.Topic == t.cfg.ProgressTopic {
		// The decoder refuses this topic; a sink used without it must not
		// write a record the progress reader could take for its own.
		done(&Error{ID: ev.ID(), Topic: ev.Topic, Err: errProgressTopic})
		return
	}
	t.mu.Lock()
	if err := t.failErr; err != nil {
		t.mu.Unlock()
		done(err)
		return
	}
	first := len(t.queue) == 0
	t.queue = append(t.queue, txnItem{ev: ev, done: done})
	t.mu.Unlock()
	if first {
		t.poke()
	}
}

// NeedsPositionOrder tells package pump that the sink takes a record at or
// before the last one it was handed for one it already holds (how it
// skips what a committed transaction holds after a restart): a dead letter,
// published after the records behind it, would be reported done unwritten.
func (t *TxnProducer) NeedsPositionOrder() bool { return true }

// EndTxn does nothing: Kafka transactions end by age and size, at any
// record boundary (the progress record's index covers a split).
func (t *TxnProducer) EndTxn(context.Context, outbox.Commit) error { return nil }

// Abort aborts the open Kafka transaction, fails every record not yet
// committed, and returns once Run has stopped or ctx ends.
func (t *TxnProducer) Abort(ctx context.Context) error {
	select {
	case t.abort <- struct{}{}:
	default:
	}
	select {
	case <-t.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run produces until ctx ends (it then aborts what is still open: call it
// after the stream drained) or a permanent error: fenced by another
// process, a record refused, a transaction that can neither commit nor
// abort. Records not committed then fail. Meanwhile it watches the
// progress topic for hanging transactions (TxnStats.HangingSince).
func (t *TxnProducer) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	var g errgroup.Group
	g.Go(func() error { return t.hangs.Run(ctx, kadm.NewClient(t.admin)) })
	err := t.produce(ctx)
	stop()
	_ = g.Wait() // the watch only ever ends with ctx
	return err
}

func (t *TxnProducer) produce(ctx context.Context) (err error) {
	defer close(t.stopped)
	defer func() {
		t.shutdown(err)
		if t.cl != nil {
			t.cl.Close()
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.abort:
			// The pump asked: its error is the cause, and it reports it.
			return nil
		case <-t.wake:
		case <-timer.C:
		}
		if err := t.step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		timer.Stop()
		if t.inTxn {
			timer.Reset(time.Until(t.due()))
		}
	}
}

// Renew makes the producer prepare itself again (init: fence, read the
// progress topic) before its next transaction: a new stream starts, and
// another process may have held the slot since the last one, its
// producer fencing this one's and its transactions moving the progress
// on. Without it, the first transaction of a slot taken back failed,
// fenced. (pump.Renewer.)
func (t *TxnProducer) Renew() { t.renew.Store(true) }

// step takes the queued records into the open transaction and commits it
// when it is due.
func (t *TxnProducer) step(ctx context.Context) error {
	// A transaction still open belongs to the last stream (its drain
	// timed out): it commits, or fails, first.
	if !t.inTxn && t.renew.Swap(false) && t.cl != nil {
		t.cl.Close()
		t.cl = nil
		t.log.Info("a new replication session: preparing the exactly-once producer again (another process may have held the slot meanwhile)")
	}
	if t.cl == nil {
		if !t.hasQueued() {
			return nil
		}
		if err := t.init(ctx); err != nil {
			return err
		}
	}
	if err := t.addAll(t.take()); err != nil {
		return err
	}
	if !t.inTxn || (time.Now().Before(t.due()) && !t.full()) {
		return nil
	}
	if err := t.commit(ctx); err != nil {
		return err
	}
	if t.hasQueued() {
		// What did not fit goes into the next transaction, after Run
		// had a look at ctx and Abort.
		t.poke()
	}
	return nil
}

// due is when the open transaction's commit starts: early by what commits
// take, so that it ends, and read_committed consumers see its records,
// within the interval of its first record (by at most half of it: a slow
// Kafka costs no more than twice the commits).
func (t *TxnProducer) due() time.Time {
	return t.openSince.Add(t.cfg.Interval - min(t.commitTook, t.cfg.Interval/2))
}

// tookToCommit adds one commit's duration to the moving average.
func tookToCommit(avg, took time.Duration) time.Duration {
	if avg == 0 {
		return took
	}
	return avg + (took-avg)/8
}

// full says the open transaction holds as many records or bytes as it may.
func (t *TxnProducer) full() bool {
	return t.inTxn && (len(t.open) >= t.cfg.MaxRecords || t.openBytes >= t.cfg.MaxBytes)
}

func (t *TxnProducer) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *TxnProducer) hasQueued() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue) > 0
}

func (t *TxnProducer) take() []txnItem {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.queue
	t.queue = nil
	return q
}

// addAll adds items in order until the open transaction is full. Those
// not added go back to the front of the queue: for the next transaction,
// or, when one could not be added, for shutdown to fail (done is called
// once for every record, on every path).
func (t *TxnProducer) addAll(items []txnItem) error {
	for i, it := range items {
		if t.full() {
			t.requeue(items[i:])
			return nil
		}
		if err := t.add(it); err != nil {
			t.requeue(items[i:])
			return err
		}
	}
	return nil
}

func (t *TxnProducer) requeue(items []txnItem) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.queue = append(items[:len(items):len(items)], t.queue...)
}

// add puts one record into the open transaction (beginning one if needed),
// or skips it when a committed transaction already holds it. On an error
// it has taken nothing.
func (t *TxnProducer) add(it txnItem) error {
	pos := it.ev.Position()
	if !t.committed.Before(pos) {
		t.skipped.Add(1)
		it.done(nil)
		return nil
	}
	if !t.last.Before(pos) {
		// Sent again by a new stream while its first copy is in the open
		// transaction: done with that one, not written twice.
		t.open = append(t.open, it)
		return nil
	}
	if !t.inTxn {
		if err := t.cl.BeginTransaction(); err != nil {
			return t.classify("beginning a Kafka transaction", err)
		}
		t.inTxn, t.openSince = true, time.Now()
	}
	t.cl.Produce(context.Background(), toRecord(it.ev), t.produced)
	t.open = append(t.open, it)
	t.openBytes += it.ev.Size()
	t.last = pos
	return nil
}

// produced is franz-go's callback for every record of a transaction.
func (t *TxnProducer) produced(r *kgo.Record, err error) {
	if err == nil {
		return
	}
	t.recMu.Lock()
	defer t.recMu.Unlock()
	switch {
	case t.recErr != nil:
	case r.Topic == t.cfg.ProgressTopic:
		t.recErr = fmt.Errorf("writing the progress record to topic %s: %w", r.Topic, err)
	default:
		id, _ := headerValue(r, "id")
		t.recErr = &Error{ID: id, Topic: r.Topic, Err: explainUnknownTopic(err, t.kafka.Names)}
	}
}

func (t *TxnProducer) takeRecErr() error {
	t.recMu.Lock()
	defer t.recMu.Unlock()
	err := t.recErr
	t.recErr = nil
	return err
}

// headerValue returns the value of r's first header named key ("" when
// none) and whether it has one.
func headerValue(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// commit writes the progress record and commits the open transaction. A
// commit whose outcome Kafka did not confirm is aborted (which fences
// anything of it still pending), and the progress topic then says whether
// it had committed after all; if not, its records go into a new one.
func (t *TxnProducer) commit(ctx context.Context) error {
	prog := t.last
	start := time.Now()
	t.cl.Produce(ctx, progressRecord(t.cfg.ProgressTopic, t.key, t.txnID, prog), t.produced)
	if err := t.cl.Flush(ctx); err != nil {
		return fmt.Errorf("waiting for Kafka to acknowledge the transaction's records: %w", err)
	}
	if err := t.takeRecErr(); err != nil {
		return t.abortOpen(ctx, err)
	}
	flushed := time.Now()
	err := t.cl.EndTransaction(ctx, kgo.TryCommit)
	if err == nil {
		t.committed = prog
		t.commits.Add(1)
		t.commitTook = tookToCommit(t.commitTook, time.Since(start))
		t.txnAgain = 0
		t.log.Debug("committed a Kafka transaction", "records", len(t.open), "progress", prog,
			"open_for", start.Sub(t.openSince), "flush", flushed.Sub(start), "end_txn", time.Since(flushed))
		t.finishOpen(nil)
		t.noteProducerID(ctx)
		return nil
	}
	if fenced(err) {
		return t.classify("committing a Kafka transaction", err)
	}
	if aerr := t.cl.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
		return t.classify("committing a Kafka transaction ("+err.Error()+"), then aborting it", aerr)
	}
	pos, rerr := readProgress(ctx, t.readOpts(), kadm.NewClient(t.admin), t.cfg.ProgressTopic, t.key, t.txnID, t.cfg.Names, t.log)
	if rerr != nil {
		return fmt.Errorf("committing a Kafka transaction (%v): its outcome is unknown and %w", err, rerr)
	}
	t.retried.Add(1)
	if !pos.Before(prog) {
		t.log.Warn("Kafka reported an error committing a transaction, but its progress record is in Kafka: it did commit", "err", err, "progress", pos)
		t.committed = pos
		t.finishOpen(nil)
		return nil
	}
	t.log.Warn("Kafka transaction not committed; it was aborted and its records go into a new one", "err", err, "records", len(t.open), "progress", pos)
	items := t.open
	t.open, t.openBytes, t.inTxn = nil, 0, false
	t.committed, t.last = pos, pos
	return t.addAll(items)
}

// noteProducerID logs a new producer id for the transactional id: Kafka
// hands one out when the epoch of the last ran out, the moment where
// brokers have had bugs (KAFKA-18660 self-fenced producers there).
func (t *TxnProducer) noteProducerID(ctx context.Context) {
	id, epoch, err := t.cl.ProducerID(ctx)
	if err != nil {
		return // the next transaction meets the error, if it lasts
	}
	now := producerID{id, epoch}
	if was := t.producer; now.id != was.id {
		t.log.Info("Kafka gave the transactional id a new producer id (the last one's epoch ran out, or it was fenced and initialized again)",
			"transactional_id", t.txnID, "producer_id", id, "producer_epoch", epoch, "previous_producer_id", was.id, "previous_producer_epoch", was.epoch)
	}
	t.producer = now
}

// abortOpen aborts the open transaction because a record of it failed for
// good.
func (t *TxnProducer) abortOpen(ctx context.Context, cause error) error {
	if fenced(cause) {
		return t.classify("producing a record", cause)
	}
	if abortable(cause) && t.txnAgain < maxTxnAgain {
		// The transaction failed, not a record: Kafka lost track of it or
		// of the producer's sequence (a request lost on the wire does
		// that; franz-go then deems the producer unusable). The producer
		// is prepared again, which aborts the transaction if the abort
		// here cannot, and its records go into a new one, a few times in
		// a row before outboxd gives up.
		t.txnAgain++
		t.log.Warn("Kafka refused the open transaction; it is aborted, the producer prepared again, and its records go into a new transaction",
			"err", cause, "records", len(t.open), "attempt", t.txnAgain)
		_ = t.cl.AbortBufferedRecords(ctx)
		_ = t.cl.EndTransaction(ctx, kgo.TryAbort)
		t.cl.Close()
		t.cl = nil
		items := t.open
		t.open, t.openBytes, t.inTxn = nil, 0, false
		t.requeue(items)
		t.poke()
		return nil
	}
	err := fmt.Errorf("%w, because a record failed for good: %w", outbox.ErrTransactionAborted, cause)
	if aerr := t.cl.AbortBufferedRecords(ctx); aerr != nil {
		return fmt.Errorf("%w; and aborting its buffered records: %v", err, aerr)
	}
	if aerr := t.cl.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
		return fmt.Errorf("%w; and ending it: %v", err, aerr)
	}
	t.inTxn = false
	return err
}

// abortable reports an error that fails the transaction rather than a
// record of it: aborting it lets the transactional id go on.
func abortable(err error) bool {
	for _, e := range []error{kerr.InvalidTxnState, kerr.OutOfOrderSequenceNumber, kerr.UnknownProducerID,
		kerr.InvalidProducerIDMapping, kerr.TransactionAbortable} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// maxTxnAgain is how many transactions in a row Kafka may refuse (see
// abortOpen) before the producer stops: a refusal that lasts is not one a
// new transaction gets past.
const maxTxnAgain = 3

// finishOpen reports every record of the open transaction done.
func (t *TxnProducer) finishOpen(err error) {
	items := t.open
	t.open, t.openBytes, t.inTxn = nil, 0, false
	for _, it := range items {
		it.done(err)
	}
}

// shutdown aborts a transaction still open and fails every record not
// committed, queued or not, and every later Publish.
func (t *TxnProducer) shutdown(cause error) {
	if cause == nil {
		cause = errTxnProducerStopped
	}
	if !errors.Is(cause, outbox.ErrTransactionAborted) {
		cause = fmt.Errorf("%w: %w", outbox.ErrTransactionAborted, cause)
	}
	if t.inTxn && t.cl != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = t.cl.AbortBufferedRecords(ctx)
		if err := t.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.log.Warn("could not abort the open Kafka transaction; the coordinator aborts it after the transaction timeout, or the next producer does", "err", err)
		}
		cancel()
		t.inTxn = false
	}
	t.finishOpen(cause)
	t.mu.Lock()
	t.failErr = cause
	q := t.queue
	t.queue = nil
	t.mu.Unlock()
	for _, it := range q {
		it.done(cause)
	}
}

var errTxnProducerStopped = errors.New("the exactly-once producer stopped")

// init fences earlier producers of the transactional id, makes sure the
// progress topic exists, and reads the last committed position. Kafka or
// PostgreSQL being unreachable is retried until ctx ends.
func (t *TxnProducer) init(ctx context.Context) error {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(250*time.Millisecond),
		backoff.WithMaxInterval(10*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		err := t.tryInit(ctx)
		if err == nil || ctx.Err() != nil || permanentInit(err) {
			return err
		}
		wait := bo.NextBackOff()
		t.log.Warn("preparing the exactly-once producer; retrying", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (t *TxnProducer) tryInit(ctx context.Context) error {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	srv, err := t.identify(actx)
	if err != nil {
		return err
	}
	sys, timeline := srv.SystemID, srv.Timeline
	id := t.cfg.TransactionalID
	if id == "" {
		id = "outboxd-" + t.slot + "-" + sys
	}
	adm := kadm.NewClient(t.admin)
	created, err := ensureProgressTopic(actx, adm, t.cfg.ProgressTopic, t.cfg.Names)
	if err != nil {
		return err
	}
	if created {
		t.log.Info("created the progress topic", "topic", t.cfg.ProgressTopic)
	}
	cl, err := kgo.NewClient(clientOpts(t.kafka, t.log, t.dataLoss.detected,
		kgo.TransactionalID(id), kgo.TransactionTimeout(t.cfg.Timeout), kgo.RetryBackoffFn(txnRetryBackoff))...)
	if err != nil {
		return &permanentError{fmt.Errorf("creating the transactional Kafka producer: %w", err)}
	}
	// Initializing the producer id bumps the epoch: every earlier producer
	// of this id is fenced and its open transaction aborted, before the
	// progress is read.
	start := time.Now()
	pid, epoch, err := cl.ProducerID(actx)
	if err != nil {
		cl.Close()
		return t.classify("initializing transactional id "+id, err)
	}
	fenced := time.Now()
	key := progressKey(t.slot, sys, timeline)
	pos, err := readProgress(actx, t.readOpts(), adm, t.cfg.ProgressTopic, key, id, t.cfg.Names, t.log)
	if err != nil {
		cl.Close()
		return err
	}
	if srv.WALEnd != 0 && srv.WALEnd < pos.CommitLSN {
		cl.Close()
		return &permanentError{fmt.Errorf("the progress topic %s records position %s for key %s, past the server's WAL end %s on the same system and timeline: "+
			"the server's storage was rolled back (a restore or a snapshot without a new timeline), and the rows it commits now below %s would be skipped; "+
			"start with another %s (the slot's unconfirmed tail is published again) once the server is where it should be",
			t.cfg.ProgressTopic, pos, key, srv.WALEnd, pos.CommitLSN, t.cfg.Names.Of("ProgressTopic"))}
	}
	t.cl, t.txnID, t.key, t.committed, t.last = cl, id, key, pos, pos
	t.producer = producerID{pid, epoch}
	t.log.Info("exactly-once producer ready", "transactional_id", id, "producer_id", pid, "producer_epoch", epoch,
		"progress_topic", t.cfg.ProgressTopic, "resume_after", pos,
		"init_producer", fenced.Sub(start).Round(time.Millisecond), "read_progress", time.Since(fenced).Round(time.Millisecond))
	return nil
}

// txnRetryBackoff is how long the transactional client waits before it
// sends a failed request again: 20 ms, doubling up to 5 s. franz-go's own
// starts at 250 ms, which is what a transaction's first record waited
// whenever Kafka answered CONCURRENT_TRANSACTIONS (the previous commit's
// markers still being written, under transaction protocol v2): most of
// a transaction interval, and in a backlog's drain once per transaction.
func txnRetryBackoff(fails int) time.Duration {
	return min(20*time.Millisecond<<min(max(fails-1, 0), 10), 5*time.Second)
}

// readOpts are the options of the client that reads the progress topic.
func (t *TxnProducer) readOpts() []kgo.Opt {
	return clientOpts(t.kafka, t.log, func(string, int32) {})
}

type permanentError struct{ error }

func (e *permanentError) Unwrap() error { return e.error }

func permanentInit(err error) bool {
	var pe *permanentError
	if errors.As(err, &pe) || fenced(err) || errors.Is(err, errNotCompacted) {
		return true
	}
	for _, denied := range []error{kerr.TransactionalIDAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.TopicAuthorizationFailed, kerr.InvalidTransactionTimeout, kerr.PolicyViolation} {
		if errors.Is(err, denied) {
			return true
		}
	}
	return false
}

// fenced reports an error saying another producer took the transactional
// id over (under KIP-890, an invalid producer epoch says the same).
func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// ErrFenced is matched by the error of a producer fenced by another one.
var ErrFenced = errors.New("fenced by another outboxd process with the same transactional id")

// classify wraps a transaction-level error, naming fencing as such.
func (t *TxnProducer) classify(what string, err error) error {
	if fenced(err) {
		n := t.cfg.Names
		return fmt.Errorf("%s: %w (a standby took the slot over, or %s is shared; Kafka 4 also says so when it aborted a transaction open longer than %s); this process stops and writes nothing more, and a restart resumes from the progress topic: %w",
			what, ErrFenced, n.Of("TransactionalID"), n.Of("Timeout"), err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Ping checks that a broker answers.
func (t *TxnProducer) Ping(ctx context.Context) error { return ping(ctx, t.admin) }

// CheckTopic is Producer.CheckTopic.
func (t *TxnProducer) CheckTopic(ctx context.Context, topic string) error {
	return checkTopic(ctx, t.admin, topic)
}

// CreateTopic is Producer.CreateTopic.
func (t *TxnProducer) CreateTopic(ctx context.Context, topic string) (bool, error) {
	return createTopic(ctx, t.admin, topic)
}

// TxnStats counts the sink's transactions.
type TxnStats struct {
	Committed uint64 // Kafka transactions committed
	Retried   uint64 // commits whose outcome Kafka did not confirm, resolved from the progress topic
	Skipped   uint64 // events skipped because a committed transaction held them already
	// HangingSince is when the last stable offset of a progress topic
	// partition stopped moving below its high watermark, once that has
	// lasted longer than the transaction timeout (a hanging transaction,
	// reported in a Warn); zero otherwise.
	HangingSince time.Time
}

// Stats returns the counters; safe from any goroutine.
func (t *TxnProducer) Stats() TxnStats {
	return TxnStats{Committed: t.commits.Load(), Retried: t.retried.Load(), Skipped: t.skipped.Load(), HangingSince: t.hangs.Since()}
}

// DataLossEvents counts the times Kafka reported lost records (see
// Producer.DataLossEvents).
func (t *TxnProducer) DataLossEvents() uint64 { return t.dataLoss.n.Load() }

// Close closes the client Run does not own. Call after Run returned.
func (t *TxnProducer) Close() { t.admin.Close() }
