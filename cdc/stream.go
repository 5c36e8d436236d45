package cdc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/internal/sqlquote"
)

var errShutdownTimeout = errors.New("shutdown timeout reached")

// item is one event on its way to the publishing goroutine.
type item struct {
	ev  decode.Event
	txn checkpoint.Txn
}

// stream is one replication session. The reading goroutine owns conn, dec,
// the open transaction and the batch; the publishing goroutine only calls
// Publish; acknowledgments reach the tracker from the producer's callbacks.
type stream struct {
	s    *Streamer
	conn *pgconn.PgConn
	tr   *checkpoint.Tracker
	dec  *decode.Decoder

	inTx  bool
	txn   checkpoint.Txn
	batch []item
	// free returns handed-over batches, emptied, for reuse: allocating a
	// BatchSize-capacity batch per transaction was the largest allocation
	// under load.
	free       chan []item
	nextStatus time.Time
	lastStatus time.Time
	confirmed  checkpoint.LSN // last flush position sent

	failMu  sync.Mutex
	failErr error
	abort   context.CancelCauseFunc
	hard    context.Context
}

func newStream(s *Streamer, conn *pgconn.PgConn, tr *checkpoint.Tracker) *stream {
	return &stream{
		s:         s,
		conn:      conn,
		tr:        tr,
		dec:       decode.NewDecoder(s.cfg.Columns),
		batch:     make([]item, 0, s.cfg.BatchSize),
		free:      make(chan []item, batchesInFlight+2),
		confirmed: tr.Flushed(),
	}
}

// start issues START_REPLICATION. lsn is the watermark: the server starts at
// the later of it and the slot's confirmed position, so nothing this process
// confirmed is sent again.
func (st *stream) start(ctx context.Context, lsn checkpoint.LSN) error {
	// publication_names is a list of identifiers in a string literal.
	pubs := sqlquote.Literal(sqlquote.Identifier(st.s.cfg.Publication))
	return pglogrepl.StartReplication(ctx, st.conn, st.s.cfg.Slot, lsn, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names " + pubs},
	})
}

// run streams until ctx ends (graceful: finish the open transaction, drain,
// confirm), a record fails for good, or the connection breaks.
//
// Contexts: ctx ending stops reading between transactions; abort ends on a
// permanent failure and stops reading at once; soft ends on either and
// starts the clock of hard, which ends ShutdownTimeout later and bounds
// the drain.
func (st *stream) run(ctx context.Context) error {
	hard, hardCancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hardCancel(nil)
	abort, abortCancel := context.WithCancelCause(hard)
	defer abortCancel(nil)
	soft, softCancel := context.WithCancelCause(abort)
	defer softCancel(nil)
	defer context.AfterFunc(ctx, func() { softCancel(context.Cause(ctx)) })()
	var timerMu sync.Mutex
	var timer *time.Timer
	defer context.AfterFunc(soft, func() {
		timerMu.Lock()
		defer timerMu.Unlock()
		timer = time.AfterFunc(st.s.cfg.ShutdownTimeout, func() { hardCancel(errShutdownTimeout) })
	})()
	defer func() {
		timerMu.Lock()
		defer timerMu.Unlock()
		if timer != nil {
			timer.Stop()
		}
	}()
	st.abort, st.hard = abortCancel, hard

	batches := make(chan []item, batchesInFlight)
	published := make(chan struct{})
	var g errgroup.Group
	g.Go(func() error {
		defer close(published)
		return st.publish(hard, batches)
	})
	g.Go(func() error {
		err := st.receive(ctx, abort, batches)
		close(batches)
		select {
		case <-published:
		case <-hard.Done():
		}
		// The final status: the watermark after the drain, then a clean end
		// of the stream, so that the server has read the status before the
		// connection closes (see endStream).
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if serr := st.sendStatus(fctx); serr != nil {
			if err == nil {
				err = serr
			}
		} else if eerr := st.endStream(); eerr != nil && err == nil && ctx.Err() != nil {
			st.s.log.Warn("could not end the replication stream cleanly; the last confirmation may be lost and its records re-sent", "slot", st.s.cfg.Slot, "err", eerr)
		}
		if records, txns := st.tr.InFlight(); (records > 0 || txns > 0) && ctx.Err() != nil {
			st.s.log.Warn("stopping with records unconfirmed; they are sent again on the next start",
				"slot", st.s.cfg.Slot, "records", records, "transactions", txns, "confirmed_lsn", st.confirmed, "cause", context.Cause(hard))
		}
		return err
	})
	err := g.Wait()
	if ferr := st.failure(); ferr != nil {
		return permanent(ferr)
	}
	return err
}

// batchesInFlight is how many batches wait for the publishing goroutine.
const batchesInFlight = 4

// receive is the reading loop. It returns nil when stopped by ctx (at a
// transaction boundary, noticed within confirmInterval) or by abort.
func (st *stream) receive(ctx, abort context.Context, batches chan<- []item) error {
	// One deadline context serves every message until it expires: one per
	// message cost a tenth of outboxd's CPU during a backlog drain. It
	// wakes the loop at least every confirmInterval, to confirm
	// acknowledgments that arrived meanwhile and to notice a stop request.
	var wake deadlineCtx
	defer wake.stop()
	pacer := newReadPacer(st.conn.Conn())
	for {
		if abort.Err() != nil || (ctx.Err() != nil && !st.inTx) {
			return nil
		}
		if st.statusDue() {
			if err := st.sendStatus(abort); err != nil {
				return err
			}
		}
		now := time.Now()
		wait := confirmInterval
		if pacer.pacing() {
			wait = pacerWait
		}
		if wake.ctx == nil || wake.ctx.Err() != nil || st.nextStatus.Before(wake.at) || wake.at.After(now.Add(wait)) {
			at := now.Add(wait)
			if st.nextStatus.Before(at) {
				at = st.nextStatus
			}
			wake.renew(abort, at)
			pacer.renewed()
		}
		msg, err := st.conn.ReceiveMessage(wake.ctx)
		if err != nil {
			if pgconn.Timeout(err) || abort.Err() != nil {
				pacer.timedOut()
				continue
			}
			return fmt.Errorf("receiving from the replication connection: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			pacer.received(len(m.Data), time.Now())
			if err := st.handle(abort, m.Data, batches); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream")
		}
	}
}

// deadlineCtx is a context with a deadline that is renewed when it ends.
type deadlineCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	at     time.Time
}

func (d *deadlineCtx) renew(parent context.Context, at time.Time) {
	d.stop()
	d.ctx, d.cancel = context.WithDeadline(parent, at)
	d.at = at
}

func (d *deadlineCtx) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

func (st *stream) handle(abort context.Context, data []byte, batches chan<- []item) error {
	if len(data) == 0 {
		return errors.New("empty CopyData message on the replication connection")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parsing keepalive: %w", err)
		}
		st.tr.Idle(pkm.ServerWALEnd)
		st.s.counters.serverWALEnd.Store(uint64(pkm.ServerWALEnd))
		if pkm.ReplyRequested {
			st.nextStatus = time.Time{}
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parsing XLogData: %w", err)
		}
		st.s.counters.serverWALEnd.Store(uint64(xld.ServerWALEnd))
		m, err := st.dec.Decode(xld.WALData)
		if err != nil {
			return permanent(fmt.Errorf("decoding WAL at %s on slot %s: %w", xld.WALStart, st.s.cfg.Slot, err))
		}
		return st.apply(abort, m, batches)
	default:
		return nil
	}
}

// apply feeds one decoded message to the tracker and the batch.
func (st *stream) apply(abort context.Context, m decode.Message, batches chan<- []item) error {
	switch m.Kind {
	case decode.KindBegin:
		txn, err := st.tr.Begin()
		if err != nil {
			return permanent(fmt.Errorf("transaction %d: %w", m.Xid, err))
		}
		st.txn, st.inTx = txn, true
	case decode.KindEvent:
		if !st.inTx {
			return permanent(fmt.Errorf("insert into %s outside a transaction", m.Event.Table))
		}
		if err := st.tr.Add(st.txn); err != nil {
			return permanent(err)
		}
		st.batch = append(st.batch, item{ev: m.Event, txn: st.txn})
		if len(st.batch) >= st.s.cfg.BatchSize {
			return st.send(abort, batches)
		}
	case decode.KindCommit:
		if !st.inTx {
			return permanent(fmt.Errorf("commit at %s outside a transaction", m.EndLSN))
		}
		if err := st.tr.Commit(st.txn, m.EndLSN); err != nil {
			return permanent(err)
		}
		st.inTx = false
		st.s.counters.transactions.Add(1)
		if len(st.batch) > 0 {
			return st.send(abort, batches)
		}
	}
	return nil
}

// confirmInterval is how soon newly acknowledged transactions are
// confirmed to PostgreSQL: it bounds what a crash re-sends beyond the
// records in flight (at-least-once duplicates).
const confirmInterval = 100 * time.Millisecond

// statusDue reports whether a standby status should go out now: on
// schedule, when the server asked, or when the watermark moved and the
// last status is confirmInterval old.
func (st *stream) statusDue() bool {
	now := time.Now()
	if !now.Before(st.nextStatus) {
		return true
	}
	return now.Sub(st.lastStatus) >= confirmInterval && st.tr.Flushed() != st.confirmed
}

// send hands the batch to the publishing goroutine, sending standby status
// on schedule while it waits (Kafka slow or down).
func (st *stream) send(abort context.Context, batches chan<- []item) error {
	select {
	case batches <- st.batch:
		st.nextBatch()
		return nil
	default: // the publisher is behind: wait, confirming on schedule
	}
	for {
		t := time.NewTimer(min(time.Until(st.nextStatus), confirmInterval))
		select {
		case batches <- st.batch:
			t.Stop()
			st.nextBatch()
			return nil
		case <-t.C:
			if !st.statusDue() {
				continue
			}
			if err := st.sendStatus(abort); err != nil {
				return err
			}
		case <-abort.Done():
			t.Stop()
			return nil
		}
	}
}

// nextBatch starts an empty batch, reusing one the publisher is done with.
func (st *stream) nextBatch() {
	select {
	case b := <-st.free:
		st.batch = b
	default:
		st.batch = make([]item, 0, st.s.cfg.BatchSize)
	}
}

// sendStatus reports the watermark as write, flush and apply position (all
// three explicitly: pglogrepl would copy a non-zero write position into a
// zero flush position).
func (st *stream) sendStatus(ctx context.Context) error {
	pos := st.tr.Flushed()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, st.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos,
		WALFlushPosition: pos,
		WALApplyPosition: pos,
		ClientTime:       time.Now(),
	})
	st.lastStatus = time.Now()
	st.nextStatus = st.lastStatus.Add(st.s.cfg.StatusInterval)
	if err != nil {
		return fmt.Errorf("sending standby status on slot %s: %w", st.s.cfg.Slot, err)
	}
	if pos != st.confirmed {
		st.s.log.Debug("confirmed", "slot", st.s.cfg.Slot, "lsn", pos)
		st.confirmed = pos
		st.s.counters.confirmed.Store(uint64(pos))
	}
	return nil
}

// endStream sends CopyDone and reads (discarding) until the server ends
// the stream. Closing the socket right after the final status is not
// enough: with replication data still unread on our side, the kernel
// resets the connection and the server may drop the status it has not yet
// read, so the next start re-sends what this one confirmed.
func (st *stream) endStream() error {
	nc := st.conn.Conn()
	if err := nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	defer nc.SetDeadline(time.Time{}) //nolint:errcheck // the connection is closed next
	_, err := pglogrepl.SendStandbyCopyDone(context.Background(), st.conn)
	return err
}

// publish is the publishing goroutine.
func (st *stream) publish(hard context.Context, batches <-chan []item) error {
	for batch := range batches {
		for i := range batch {
			if st.failure() != nil {
				break // nothing after a failed record is worth sending now
			}
			ev := &batch[i].ev
			txn, topic, size, commit, sent := batch[i].txn, ev.Topic, len(ev.Key)+len(ev.Value), ev.CommitTime, time.Now()
			st.s.pub.Publish(hard, ev, func(err error) {
				if err == nil {
					st.s.counters.acked(size, commit)
					if st.s.observer != nil {
						st.s.observer.Acknowledged(topic, size, time.Since(sent), commit)
					}
				}
				st.done(txn, err)
			})
		}
		clear(batch) // drop the references to the events' bytes
		select {
		case st.free <- batch[:0]:
		default:
		}
	}
	if err := st.s.pub.Flush(hard); err != nil && hard.Err() == nil {
		return err
	}
	return nil
}

// done is the acknowledgment callback of one record.
func (st *stream) done(txn checkpoint.Txn, err error) {
	if err == nil {
		if err := st.tr.Ack(txn); err != nil {
			st.fail(err)
		}
		return
	}
	if st.hard.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return // abandoned at the shutdown timeout: unconfirmed, sent again next time
	}
	st.fail(err)
}

func (st *stream) fail(err error) {
	st.failMu.Lock()
	if st.failErr == nil {
		st.failErr = err
	}
	st.failMu.Unlock()
	st.abort(err)
}

func (st *stream) failure() error {
	st.failMu.Lock()
	defer st.failMu.Unlock()
	return st.failErr
}
