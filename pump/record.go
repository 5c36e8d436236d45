package pump

import (
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/outbox"
)

// record is one record on its way through the sink.
type record struct {
	p          *Pump
	tr         *checkpoint.Tracker // of the stream it belongs to
	txn        checkpoint.Txn
	ev         outbox.Event
	size       int // counted in the window
	sent       time.Time
	deadLetter bool // ev is the dead-letter record (of a refused record or a rejected row)
	reference  bool // ev is a reference to a record too large for the dead-letter topic

	// commitNS is ev's commit time (unix nanoseconds; 0 when it has none),
	// set before the record takes room in the window and never changed
	// after (ev is, for a dead letter): the window reads it under its lock.
	commitNS int64
	// prev and next link the records holding room in the window, oldest
	// first; released says the record gave its room back: only under the
	// window's lock.
	prev, next *record
	released   bool
}

// done is the sink's callback. It runs on the sink's goroutines (franz-go's
// for package publish): a panic in it (the tracker, the observer) fails the
// pipeline instead of killing the process, the record unacknowledged unless
// it already was.
func (r *record) done(err error) {
	p := r.p
	defer p.recoverCallback(r)
	if err == nil {
		p.ack(r)
		return
	}
	if p.withdrawing.Load() {
		// Withdrawn: the next stream sends it again.
		p.win.release(r)
		return
	}
	// A record failed with its Kafka transaction did nothing wrong itself:
	// the pipeline stops rather than dead-letter it.
	if p.cfg.DeadLetterTopic != "" && !r.deadLetter && p.Err() == nil && !errors.Is(err, outbox.ErrTransactionAborted) {
		p.queueDeadLetter(r, err)
		return
	}
	// The record stays unacknowledged: the watermark never passes it.
	p.fail(fmt.Errorf("%w (commit LSN %s)", err, r.ev.CommitLSN))
	p.win.release(r)
}

func (p *Pump) ack(r *record) {
	if err := r.tr.Ack(r.txn); err != nil {
		p.fail(fmt.Errorf("acknowledging outbox id %s: %w", r.ev.ID(), err))
	}
	p.win.release(r)
	if r.deadLetter {
		p.deadLettered.Add(1)
		if p.obs != nil {
			p.obs.DeadLettered(header(&r.ev, hdrTopic))
		}
		return
	}
	size := r.ev.Size()
	p.acked.Add(1)
	p.ackedBytes.Add(uint64(size))
	ns := r.ev.CommitTime.UnixNano()
	for {
		cur := p.newestCommit.Load()
		if ns <= cur || p.newestCommit.CompareAndSwap(cur, ns) {
			break
		}
	}
	if p.obs != nil {
		p.obs.Acknowledged(r.ev.Topic, size, time.Since(r.sent), r.ev.CommitTime)
	}
}

// recoverCallback, deferred by the sink's callbacks, turns a panic into
// the pump's failure (package contain) and gives r's room back if it was
// not yet given.
func (p *Pump) recoverCallback(r *record) {
	if v := recover(); v != nil {
		p.fail(contain.Recovered(fmt.Sprintf("handling Kafka's answer for outbox id %s", r.ev.ID()), v))
		p.win.release(r)
	}
}
