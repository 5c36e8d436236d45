package cdc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxd/outboxd/cdc/readpace"
	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
)

// confirmInterval is how soon newly acknowledged transactions are
// confirmed to PostgreSQL: it bounds what a crash re-sends beyond the
// records in flight (at-least-once duplicates). The reader waits at most
// this long while a confirmation is pending (confirmPending), and up to
// its idle wait (Config.IdleWait) when nothing is.
const confirmInterval = 100 * time.Millisecond

// reader is the one goroutine that owns a replication connection: it
// receives messages with deadlines, decodes them, hands them to the
// consumer, answers keepalives and sends the watermark as standby status,
// also while the consumer waits for room.
type reader struct {
	conn           *pgconn.PgConn
	dec            *decode.Decoder
	lay            *layout.Layout
	out            outbox.Stage
	wm             Watermark
	slot           string
	statusInterval time.Duration
	idleWait       time.Duration    // the longest read deadline when nothing is due
	readLinger     time.Duration    // Config.ReadLinger
	sharedLinger   *readpace.Shared // Config.SharedLinger
	serverTimeout  time.Duration    // silence after which the connection is taken for broken
	names          field.Names      // the stream's, for its messages
	act            *activity        // when bytes last arrived (nil in tests without a socket)
	log            *slog.Logger
	serverWALEnd   *atomic.Uint64 // for lag metrics
	confirmedLSN   *atomic.Uint64

	inTx         bool
	lastEnd      outbox.LSN // end of the last transaction handed to the consumer
	lastReceived time.Time  // when the server last sent anything
	broken       bool       // the server went silent: nothing more is sent on the connection
	nextStatus   time.Time
	lastStatus   time.Time
	confirmed    outbox.LSN // last flush position sent
	wake         deadlineCtx
}

// run reads until ctx ends (an abort: it returns at once), stop ends and no
// transaction is open (a graceful stop: it ends the wait between
// transactions at once), the consumer fails for good (a *PermanentError),
// or the connection breaks.
func (r *reader) run(ctx, stop context.Context) error {
	defer r.wake.stop()
	// Between transactions reads wait under between, which a graceful stop
	// ends; the open transaction is read to its end under ctx.
	between, endBetween := context.WithCancel(ctx)
	defer endBetween()
	defer context.AfterFunc(stop, endBetween)()
	r.wake.conn = r.conn.Conn()
	var socketRead func() int64 // the pacer's estimate needs the stream's own bytes
	if _, tls := r.conn.Conn().(*tls.Conn); !tls && r.act != nil {
		socketRead = r.act.bytesRead
	}
	pacer := readpace.New(r.conn.Conn(), socketRead, r.readLinger)
	if r.sharedLinger != nil {
		pacer.Share(r.sharedLinger)
	}
	defer pacer.Stop()
	r.lastReceived = time.Now()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if !r.inTx && stop.Err() != nil {
			return nil
		}
		if r.statusDue() {
			if err := r.sendStatus(ctx); err != nil {
				return err
			}
		}
		wait := pacer.Wait()
		if wait <= 0 {
			wait = r.idleWait
			if r.confirmPending() {
				wait = confirmInterval
			}
		}
		parent := between
		if between.Err() != nil {
			if !r.inTx {
				return nil // stopped between transactions
			}
			parent = ctx // stopping inside a transaction: read it to its end
		}
		if r.renewWake(parent, wait, pacer.LingerStarted()) {
			pacer.Renewed()
		}
		msg, err := r.conn.ReceiveMessage(r.wake.readCtx())
		if err != nil {
			// A graceful stop ends the wait as the wake context's end
			// does, by the read deadline (deadlineCtx): a timeout. Read
			// under the context itself (no conn set), it is a
			// cancellation, which pgconn reports as such; the
			// connection is as after a timeout either way.
			stopped := between.Err() != nil && errors.Is(err, context.Canceled)
			if pgconn.Timeout(err) || stopped || ctx.Err() != nil {
				if silent := r.silence(); silent > r.serverTimeout && ctx.Err() == nil {
					r.broken = true
					return fmt.Errorf("the server sent nothing on the replication connection for %s (%s %s), not even a reply to a status that asked for one: "+
						"taking the connection for broken (a network partition or a half-open connection)", silent.Round(time.Millisecond), r.names.Of("ServerTimeout"), r.serverTimeout)
				}
				pacer.TimedOut()
				continue
			}
			return fmt.Errorf("receiving from the replication connection: %w", err)
		}
		r.lastReceived = time.Now()
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			keepalive := len(m.Data) > 0 && m.Data[0] == pglogrepl.PrimaryKeepaliveMessageByteID
			pacer.Received(5+len(m.Data), time.Now(), keepalive) // with the message's header
			if err := r.handle(ctx, m.Data); err != nil {
				return err
			}
			pacer.Transaction(r.inTx)
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream")
		}
	}
}

// renewWake keeps one deadline context for every read until it expires or
// a status falls due before it: a context and a timer per message weigh on
// a backlog drain's CPU. A short deadline (the pacer's) is also
// replaced once reads no longer ask for one: left to expire, it woke the
// reader once more per transaction for nothing. A fresh wait (the read
// linger's) always gets a deadline of its own: an earlier, shorter one would
// cut it short. It reports whether it renewed.
func (r *reader) renewWake(ctx context.Context, wait time.Duration, fresh bool) bool {
	now := time.Now()
	short := wait < confirmInterval
	if !fresh && r.wake.ctx != nil && r.wake.ctx.Err() == nil && !r.nextStatus.Before(r.wake.at) && !r.wake.at.After(now.Add(wait)) &&
		(short || !r.wake.short) {
		return false
	}
	r.wake.short = short
	at := now.Add(wait)
	if r.nextStatus.Before(at) {
		at = r.nextStatus
	}
	r.wake.renew(ctx, at)
	return true
}

// handle takes one CopyData message. A panic in what it calls (decoding,
// the layout, a later stage) is returned as a permanent error (package
// contain): the session then ends as after any failure, confirming only
// what Kafka acknowledged, and stops its pipeline, not the process.
func (r *reader) handle(ctx context.Context, data []byte) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = permanent(contain.Recovered(fmt.Sprintf("handling a replication message (the last transaction read ended at %s) on slot %s", r.lastEnd, r.slot), v))
		}
	}()
	if len(data) == 0 {
		return errors.New("empty CopyData message on the replication connection")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parsing keepalive: %w", err)
		}
		r.wm.Idle(outbox.LSN(pkm.ServerWALEnd))
		r.serverWALEnd.Store(uint64(pkm.ServerWALEnd))
		if pkm.ReplyRequested {
			r.nextStatus = time.Time{}
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parsing XLogData: %w", err)
		}
		r.serverWALEnd.Store(uint64(xld.ServerWALEnd))
		m, err := r.dec.Decode(xld.WALData)
		if err != nil {
			return permanent(fmt.Errorf("decoding WAL at %s on slot %s: %w", xld.WALStart, r.slot, err))
		}
		c, err := change(r.lay, &m)
		var re *outbox.RowError
		switch {
		case errors.As(err, &re):
			return r.deliver(ctx, func(ctx context.Context) error { return r.out.Reject(ctx, re) })
		case err != nil:
			return permanent(fmt.Errorf("laying out WAL at %s on slot %s: %w", xld.WALStart, r.slot, err))
		}
		switch c.Kind {
		case outbox.ChangeBegin:
			r.inTx = true
		case outbox.ChangeCommit:
			r.inTx = false
			r.lastEnd = c.Commit.EndLSN
			c.Commit.SentTime = xld.ServerTime
		case 0:
			return nil
		}
		return r.deliver(ctx, func(ctx context.Context) error { return r.out.Apply(ctx, c) })
	default:
		return nil
	}
}

// deliver hands one message to the consumer. While the consumer waits for
// room (Kafka slow or down) the standby status still goes out on schedule:
// the wait ends with the read deadline, a due status is sent, and the same
// message is offered again.
func (r *reader) deliver(ctx context.Context, apply func(context.Context) error) error {
	for waited := false; ; waited = true {
		err := apply(r.wake.ctx)
		switch {
		case err == nil:
			if waited {
				// Nothing was read while the consumer waited: the silence
				// clock starts again (the server's answers are buffered).
				r.lastReceived = time.Now()
			}
			return nil
		case ctx.Err() != nil:
			return nil // aborted
		case r.wake.ctx.Err() == nil:
			return permanent(err)
		}
		if r.statusDue() {
			if err := r.sendStatus(ctx); err != nil {
				return err
			}
		}
		r.renewWake(ctx, confirmInterval, false)
	}
}

// silence is how long the server has sent nothing: no message, and no
// byte of one still arriving.
func (r *reader) silence() time.Duration {
	last := r.lastReceived
	if a := r.act.at(); a.After(last) {
		last = a
	}
	return time.Since(last)
}

// askAfter is the silence after which a status asks the server for a
// reply: a status interval, or a third of the server timeout when that is
// shorter, so that a live server answers long before the timeout.
func (r *reader) askAfter() time.Duration { return min(r.statusInterval, r.serverTimeout/3) }

// confirmPending reports whether a transaction handed to the consumer is
// not confirmed to the server yet: Kafka has not acknowledged it, or the
// status saying so has not gone out. The reader then waits at most
// confirmInterval, so that it is confirmed within that of Kafka's
// acknowledgment also when nothing else arrives; otherwise up to the idle
// wait.
func (r *reader) confirmPending() bool {
	if r.lastEnd > r.confirmed {
		return true // without the watermark's lock: the common case while transactions flow
	}
	f := r.wm.Flushed()
	return f < r.lastEnd || r.confirmed < f
}

// statusDue reports whether a standby status should go out now: on
// schedule, when the server asked, when the server has been silent for
// askAfter since the last status (to ask it for a reply), or when the
// watermark moved and the last status is confirmInterval old.
func (r *reader) statusDue() bool {
	now := time.Now()
	if !now.Before(r.nextStatus) {
		return true
	}
	if ask := r.askAfter(); r.silence() >= ask && now.Sub(r.lastStatus) >= ask {
		return true
	}
	return now.Sub(r.lastStatus) >= confirmInterval && r.wm.Flushed() != r.confirmed
}

// sendStatus reports the watermark as write, flush and apply position (all
// three explicitly: pglogrepl would copy a non-zero write position into a
// zero flush position).
func (r *reader) sendStatus(ctx context.Context) error {
	pos := r.wm.Flushed()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, r.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(pos),
		WALFlushPosition: pglogrepl.LSN(pos),
		WALApplyPosition: pglogrepl.LSN(pos),
		ClientTime:       time.Now(),
		// After a status interval of silence, ask for a keepalive: a
		// live server answers at once, so silence beyond serverTimeout
		// means the connection is gone.
		ReplyRequested: r.silence() >= r.askAfter(),
	})
	r.lastStatus = time.Now()
	r.nextStatus = r.lastStatus.Add(r.statusInterval)
	if err != nil {
		return fmt.Errorf("sending standby status on slot %s: %w", r.slot, err)
	}
	if pos != r.confirmed {
		r.log.Debug("confirmed", "slot", r.slot, "lsn", pos)
		r.confirmed = pos
		r.confirmedLSN.Store(uint64(pos))
	}
	return nil
}

// finish sends the final status and ends the stream cleanly: CopyDone, so
// that the server reads the status before the connection closes. Closing
// the socket right after the final status is not enough: with replication
// data still unread on our side, the kernel resets the connection and the
// server may drop the status it has not yet read, so the next start
// re-sends what this one confirmed.
func (r *reader) finish(ctx context.Context) error {
	// A connection that broke is already being closed by pgconn on a
	// goroutine of its own, which writes to it: a status sent now raced
	// with that write (found by the race detector in
	// TestWalsenderTerminationResendsOnlyTheOpenTransaction). The next
	// session starts from the watermark anyway.
	if r.conn.IsClosed() {
		return errors.New("the replication connection is already closed")
	}
	if r.broken {
		// Its end would wait for an answer that cannot come (up to the
		// 5 s of the caller's context), delaying the reconnect.
		return errors.New("the replication connection is broken")
	}
	if err := r.sendStatus(ctx); err != nil {
		return err
	}
	nc := r.conn.Conn()
	if err := nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	defer nc.SetDeadline(time.Time{}) //nolint:errcheck // the connection is closed next
	_, err := pglogrepl.SendStandbyCopyDone(context.WithoutCancel(ctx), r.conn)
	return err
}

// deadlineCtx is a context with a deadline that is renewed when it ends.
//
// With conn set, reads wait under it without pgconn watching the context
// for each message: pgconn sets up and tears down a context.AfterFunc per
// read, which weighs where most messages are small (the keepalives a
// slot gets for every commit on its server). Instead, once per renewal,
// the context's end (its deadline, or its parent's end) sets conn's read
// deadline to the past, which ends a read under way as a timeout, as
// pgconn's own watch would.
type deadlineCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	at     time.Time
	short  bool // set for the pacer

	conn      net.Conn // nil: the reads pass ctx to pgconn
	mu        sync.Mutex
	gen       uint64      // renewals, so that an old context's end leaves a new one's reads alone
	stopWatch func() bool // stops the current context's AfterFunc
}

func (d *deadlineCtx) renew(parent context.Context, at time.Time) {
	d.stop()
	d.ctx, d.cancel = context.WithDeadline(parent, at)
	d.at = at
	if d.conn == nil {
		return
	}
	d.mu.Lock()
	gen := d.gen
	d.mu.Unlock()
	d.stopWatch = context.AfterFunc(d.ctx, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen {
			_ = d.conn.SetReadDeadline(time.Unix(1, 0)) // a refusal means a closed connection: its reads end anyway
		}
	})
}

// stop ends the current context, and clears the read deadline its end
// may have set.
func (d *deadlineCtx) stop() {
	if d.stopWatch != nil {
		d.stopWatch()
		d.stopWatch = nil
	}
	if d.cancel != nil {
		d.cancel()
	}
	if d.conn != nil {
		d.mu.Lock()
		d.gen++
		_ = d.conn.SetReadDeadline(time.Time{})
		d.mu.Unlock()
	}
}

// readCtx is the context to pass to pgconn's reads: none to watch when the
// read deadline follows the context's end.
func (d *deadlineCtx) readCtx() context.Context {
	if d.conn != nil {
		return context.Background()
	}
	return d.ctx
}
