package pump

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/outbox"
)

// Pump is one stream's way from decoded messages to the sink. Apply, Reject,
// Start and Drain are called by one goroutine (the reader); Run runs on its
// own for the Pump's life; the rest is safe from any goroutine.
//
// It is one type on purpose, larger than most here: the window, the batch,
// the tracker and the failure latch must change together (every record
// taken into the window ends in the tracker's ack, a dead-letter record, or
// a release, on every path), and one type keeps that in one place.
type Pump struct {
	cfg  Config
	sink Sink
	log  *slog.Logger
	obs  Observer

	tr  atomic.Pointer[checkpoint.Tracker]
	win *window

	// Only the reader goroutine touches these.
	txn        checkpoint.Txn // the open transaction
	standalone bool           // txn is a standalone row's own (see Reject)
	batch      []*record      // its records not yet handed to the sink (see flush)
	batchBytes int

	failMu  sync.Mutex
	failErr error
	failed  chan struct{} // closed when failErr is set

	dlMu      sync.Mutex
	dlJobs    []*record
	dlStopped bool // Run returned: a dead letter queued now is dropped (see stopDeadLetters)
	dlWake    chan struct{}

	acked, ackedBytes, deadLettered, txns atomic.Uint64
	newestCommit                          atomic.Int64 // unix nanoseconds of the newest acknowledged commit
	// withdrawing: Withdraw runs, and a record failing now was withdrawn,
	// not refused.
	withdrawing atomic.Bool
}

// New returns a Pump publishing to sink. Call Start before the first Apply
// and run Run alongside.
func New(cfg Config, sink Sink, log *slog.Logger) (*Pump, error) {
	if sink == nil {
		return nil, errNoSink
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o, ok := sink.(PositionOrdered); ok && o.NeedsPositionOrder() && cfg.DeadLetterTopic != "" {
		return nil, errDeadLetterOutOfOrder
	}
	cfg = cfg.WithDefaults()
	p := &Pump{cfg: cfg, sink: sink, log: log, win: newWindow(cfg.MaxInFlightRecords, cfg.MaxInFlightBytes, cfg.Budget),
		failed: make(chan struct{}), dlWake: make(chan struct{}, 1)}
	p.tr.Store(checkpoint.New(0))
	return p, nil
}

// Observe sets the observer of acknowledged records. Call before Start.
func (p *Pump) Observe(o Observer) { p.obs = o }

// Start begins a stream (a replication session) whose watermark starts at
// start. Nothing may be in flight (Drain returned) and no transaction open.
//
// A Renewer sink renews its state first.
//
// The first Start makes the pump take part in its Config.Budget (a
// standby that never streams takes no share of it); Close ends that.
func (p *Pump) Start(start outbox.LSN) {
	if b := p.cfg.Budget; b != nil {
		b.join(p.win)
	}
	p.tr.Store(checkpoint.New(start))
	p.txn, p.standalone = 0, false
	if r, ok := p.sink.(Renewer); ok {
		r.Renew()
	}
}

// Close ends the pump's part in its Config.Budget, giving its reserved
// share back to the other pipelines. Call it once the pump is done with.
func (p *Pump) Close() {
	if b := p.cfg.Budget; b != nil {
		b.leave(p.win)
	}
}

// Apply takes one change of the stream, in stream order. For an event it waits
// while the window is full; when ctx ends meanwhile it returns ctx's error
// having taken nothing, so the same message can be applied again. Any
// other error is permanent: the latched failure of an earlier record, or a
// broken transaction frame.
func (p *Pump) Apply(ctx context.Context, c outbox.Change) error {
	tr := p.tr.Load()
	switch c.Kind {
	case outbox.ChangeBegin:
		p.txn = tr.Begin()
	case outbox.ChangeEvent:
		r := &record{p: p, txn: p.txn, ev: c.Event}
		return p.publish(ctx, tr, r)
	case outbox.ChangeCommit:
		m := c.Commit
		if err := tr.Commit(p.txn, m.EndLSN, m.CommitTime); err != nil {
			return err
		}
		p.txns.Add(1)
		if p.obs != nil && !m.CommitTime.IsZero() { // a standalone row has no commit time
			p.obs.Received(m.CommitTime, m.SentTime)
		}
		p.flush()
		if err := p.Err(); err != nil {
			return err
		}
		return p.sink.EndTxn(ctx, m)
	}
	return nil
}

// Reject takes a row that cannot become a record, in its place in the
// stream. With a dead-letter topic it is published there; otherwise Reject
// returns it as the permanent error it is. Like Apply, it returns ctx's
// error having taken nothing when ctx ends while the window is full.
//
// A standalone one (a logical decoding message outside any transaction) is
// in a transaction of its own, ending just after the message: once its dead
// letter is acknowledged the slot may be confirmed past it; without a
// dead-letter topic the error names the LSN to advance the slot past.
func (p *Pump) Reject(ctx context.Context, re *outbox.RowError) error {
	if p.cfg.DeadLetterTopic == "" {
		if re.Standalone {
			return fmt.Errorf("%w (to move past it: %s; or, with run stopped and every transaction before it confirmed, "+
				"SELECT pg_replication_slot_advance('<slot>', '%s'::pg_lsn + 1), which skips whatever before it is not confirmed yet too)", re, p.cfg.Names.Of("DeadLetterTopic"), re.MessageLSN)
		}
		return fmt.Errorf("%w (commit LSN %s)", re, re.CommitLSN)
	}
	tr := p.tr.Load()
	if re.Standalone && !p.standalone {
		// Open once: after ctx's error the reader offers the same message
		// again (or ends the session, and Start drops the tracker).
		p.txn, p.standalone = tr.Begin(), true
	}
	r := &record{p: p, txn: p.txn, ev: rejectedRecord(re, p.cfg.DeadLetterTopic), deadLetter: true}
	if err := p.publish(ctx, tr, r); err != nil {
		return err
	}
	p.logDeadLetter("row cannot become a record; sending it to the dead-letter topic", &r.ev)
	if !re.Standalone {
		return nil
	}
	p.standalone = false
	return p.Apply(ctx, outbox.Change{Kind: outbox.ChangeCommit, Commit: outbox.Commit{CommitLSN: re.MessageLSN, EndLSN: re.MessageLSN + 1, CommitTime: re.CommitTime}})
}

func (p *Pump) publish(ctx context.Context, tr *checkpoint.Tracker, r *record) error {
	if err := p.Err(); err != nil {
		return err
	}
	r.size = r.ev.Size()
	if ct := r.ev.CommitTime; !ct.IsZero() {
		r.commitNS = ct.UnixNano()
	}
	if !p.win.tryAcquire(r) {
		// The batch holds room in the full window: it goes out first, or
		// that room never comes back.
		p.flush()
		if err := p.Err(); err != nil {
			return err
		}
		if err := p.win.acquire(ctx, r); err != nil {
			return err
		}
	}
	if err := tr.Add(r.txn); err != nil {
		p.win.release(r)
		return err
	}
	r.tr = tr
	p.batch = append(p.batch, r)
	p.batchBytes += r.size
	if len(p.batch) >= maxBatchRecords || p.batchBytes >= maxBatchBytes {
		p.flush()
	}
	return nil
}

// A transaction's records are handed to the sink together at its commit,
// or maxBatchRecords or maxBatchBytes at a time in a larger one (so it
// still streams), or when the window is full.
//
// Handing each record over as soon as it was decoded let the producer
// start a request with the first records while the rest were still being
// read: more socket writes per transaction and more CPU per event for
// nothing, since the records of one transaction are decoded from one read
// burst and waiting for the commit adds next to no latency.
const (
	maxBatchRecords = 256
	maxBatchBytes   = 1 << 20
)

// flush hands the batch to the sink, in order. Once a failure is latched,
// also by a record of this batch that the sink refused on the spot, it
// drops the rest instead: nothing after a failed record may be written.
func (p *Pump) flush() {
	now := time.Now()
	for i, r := range p.batch {
		if p.Err() != nil {
			p.batch = p.batch[i:]
			p.dropBatch()
			return
		}
		p.batch[i] = nil
		r.sent = now
		p.publishOne(r)
	}
	p.batch, p.batchBytes = p.batch[:0], 0
}

// publishOne hands r to the sink. A panic in the sink fails the pump (the
// pipeline stops, package contain) and gives r's room back: a Drain must
// not wait for a record the sink may never have taken, and unacknowledged
// it holds the watermark.
func (p *Pump) publishOne(r *record) {
	defer func() {
		if v := recover(); v != nil {
			p.fail(contain.Recovered("handing outbox id "+r.ev.ID()+" to the Kafka producer", v))
			p.win.release(r)
		}
	}()
	p.sink.Publish(&r.ev, r.done)
}

// dropBatch releases the batch's room without handing it over. Its records
// stay unacknowledged in their tracker, so the watermark never passes them.
func (p *Pump) dropBatch() {
	for i, r := range p.batch {
		p.batch[i] = nil
		p.win.release(r)
	}
	p.batch, p.batchBytes = p.batch[:0], 0
}

// Flushed returns the position that may be confirmed to PostgreSQL.
func (p *Pump) Flushed() outbox.LSN { return p.tr.Load().Flushed() }

// FlushedCommitTime returns the commit time of the newest transaction at
// or below Flushed in this stream (zero before the first): Kafka
// acknowledged every record of every transaction committed before it.
func (p *Pump) FlushedCommitTime() time.Time { return p.tr.Load().FlushedCommitTime() }

// Idle moves the watermark to the server's WAL end when nothing is in
// flight and no transaction is open (see checkpoint.Tracker.Idle).
func (p *Pump) Idle(walEnd outbox.LSN) { p.tr.Load().Idle(walEnd) }

// Drain waits until every record handed to the sink is done (or failed),
// or ctx ends. Records of a transaction still open (the stream ended inside
// it) that were not handed over yet are dropped, not sent: the watermark
// never passed that transaction, so the next stream sends it again from its
// start, and sending them now would only add duplicates.
func (p *Pump) Drain(ctx context.Context) error {
	p.dropBatch()
	return p.win.drain(ctx)
}

// Withdraw takes back what the sink holds of this stream, when it may
// write it later (see Withdrawer; others return nil at once): the
// records it has not seen acknowledged fail, give their room back and
// stay unacknowledged, neither dead-lettered nor latched as a failure, so
// that the next stream, in this process or another, sends them again.
// Call it between streams, after Drain, before the slot is given up.
func (p *Pump) Withdraw(ctx context.Context) error {
	w, ok := p.sink.(Withdrawer)
	if !ok {
		return nil
	}
	p.withdrawing.Store(true)
	defer p.withdrawing.Store(false)
	if err := w.Withdraw(ctx); err != nil {
		return err
	}
	return p.win.drain(ctx)
}

// Withdraws reports whether the sink needs its records withdrawn before
// the slot is given up (see Withdraw).
func (p *Pump) Withdraws() bool {
	_, ok := p.sink.(Withdrawer)
	return ok
}

// InFlight returns the records handed to the sink and not yet done, and
// their bytes.
func (p *Pump) InFlight() (records, bytes int) { return p.win.inFlight() }

// Err returns the latched permanent failure, if any.
func (p *Pump) Err() error {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	return p.failErr
}

// Run handles failures until ctx ends (nil) or a record failed for good
// without a dead-letter topic: then it tells the sink to abort what it
// still buffers, so that nothing after the failed record is written (only
// what was already in flight can be), and returns the failure.
func (p *Pump) Run(ctx context.Context) error {
	p.dlMu.Lock()
	p.dlStopped = false
	p.dlMu.Unlock()
	defer p.stopDeadLetters()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.failed:
			if err := p.sink.Abort(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("aborting the records buffered after a failure", "err", err)
			}
			return p.Err()
		case <-p.dlWake:
			for _, r := range p.takeDeadLetterJobs() {
				p.deadLetter(r)
			}
		}
	}
}

// fail latches the first permanent failure.
func (p *Pump) fail(err error) {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	if p.failErr == nil {
		p.failErr = err
		close(p.failed)
	}
}

// Stats is a snapshot of the pump's counters.
type Stats struct {
	RecordsAcked      uint64 // records the sink reported durable
	BytesAcked        uint64 // their key, value and header bytes
	DeadLettered      uint64 // records and rows sent to the dead-letter topic instead
	Transactions      uint64 // transactions ended (committed ones: pgoutput sends no others)
	InFlightRecords   int    // records handed to the sink and not yet done
	InFlightBytes     int
	NewestAckedCommit time.Time // commit time of the newest acknowledged record
	// OldestInFlightCommit is the commit time of the oldest record taken
	// into the window and not yet done (in stream order, whatever order
	// Kafka acknowledges in): how long ago the record Kafka keeps waiting
	// longest was committed. Zero when nothing is in flight, or when that
	// record has no commit time (a dead letter of a row outside any
	// transaction).
	OldestInFlightCommit time.Time
}

// Stats returns a snapshot; safe from any goroutine.
func (p *Pump) Stats() Stats {
	s := Stats{RecordsAcked: p.acked.Load(), BytesAcked: p.ackedBytes.Load(), DeadLettered: p.deadLettered.Load(), Transactions: p.txns.Load()}
	var oldest int64
	s.InFlightRecords, s.InFlightBytes, oldest = p.win.state()
	if oldest != 0 {
		s.OldestInFlightCommit = time.Unix(0, oldest)
	}
	if ns := p.newestCommit.Load(); ns != 0 {
		s.NewestAckedCommit = time.Unix(0, ns)
	}
	return s
}
