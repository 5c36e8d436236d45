package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// ledger is what the writers committed and rolled back, shared by them.
type ledger struct {
	mu         sync.Mutex
	committed  []Committed
	rolledBack []int64
	// lostInFailover are the ids of transactions whose commit was cut off
	// by a failover and that the promoted standby does not have.
	lostInFailover []int64

	events   atomic.Int64 // committed events
	maxID    atomic.Int64 // highest id allocated so far (committed or not)
	gate     atomic.Int64 // writers pause while events >= gate; openGate once no fault is to come
	must     atomic.Int64 // writers write this many events, past their target if need be (a fault waiting for a record)
	rollback atomic.Int64 // transactions rolled back
	failover atomic.Bool  // a failover is under way: the primary is dying or gone
}

// keepWriting makes the writers write n events more, past their target if
// need be: a fault waits for a record written after it.
func (l *ledger) keepWriting(n int64) {
	want := l.events.Load() + n
	l.gate.Store(max(l.gate.Load(), want))
	l.must.Store(max(l.must.Load(), want))
}

func (l *ledger) noteIDs(ids []int64) {
	for _, id := range ids {
		for {
			cur := l.maxID.Load()
			if id <= cur || l.maxID.CompareAndSwap(cur, id) {
				break
			}
		}
	}
}

// writer owns its aggregates: it alone writes them, so it knows each one's
// sequence in commit order.
type writer struct {
	n      int
	url    string
	topic  string
	aggs   []string
	seq    map[string]int
	rng    *rand.Rand
	ledger *ledger
	target int64
	log    *slog.Logger
	// rate, when positive, is this writer's share of a steady rate, in
	// events a second (a soak); due is when its next transaction is.
	rate float64
	due  time.Time
	last int // events of the last transaction committed
	// stop, when not nil, ends run once closed (between transactions);
	// hold, when not nil, is read-locked around each transaction, so that
	// whoever write-locks it knows no transaction of this writer is open
	// (a fleet run's poison row: every commit is then before it or after).
	stop <-chan struct{}
	hold *sync.RWMutex
}

func newWriter(n int, url, topic string, aggregates int, l *ledger, target int64, seed uint64, log *slog.Logger) *writer {
	w := &writer{n: n, url: url, topic: topic, seq: map[string]int{}, rng: rand.New(rand.NewPCG(seed, uint64(n))), ledger: l, target: target, log: log}
	for i := range aggregates {
		w.aggs = append(w.aggs, fmt.Sprintf("%08x-0000-4000-8000-%012x", n, i))
	}
	return w
}

// openGate is the gate once no fault is to come: writers stop at their
// target.
const openGate = 1 << 60

// run writes transactions until the ledger holds target events (and
// must) and no fault is to come, pausing while the gate says so. A fault
// that waits for a record written after it (a takeover) raises must:
// a writer that stopped at the target while a slow machine set a fault
// up left that fault waiting for a record nobody wrote (issue 49, item
// 30).
func (w *writer) run(ctx context.Context) error {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil && !w.stopped() {
		events, gate := w.ledger.events.Load(), w.ledger.gate.Load()
		done := events >= max(w.target, w.ledger.must.Load())
		switch {
		case done && gate >= openGate:
			return nil
		case done, events >= gate:
			time.Sleep(5 * time.Millisecond) // a fault is due before more writes
			continue
		}
		if conn == nil || conn.IsClosed() {
			c, err := pgx.Connect(ctx, w.url)
			if err != nil {
				w.pause(ctx) // PostgreSQL restarting
				continue
			}
			conn = c
		}
		if err := w.held(func() error { return w.transaction(ctx, conn) }); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.log.Debug("writer transaction interrupted", "writer", w.n, "err", err)
			conn.Close(context.Background())
			conn = nil
			w.pause(ctx)
			continue
		}
		w.pace(ctx)
	}
	return nil
}

// stopped reports whether stop was closed.
func (w *writer) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// held runs f under a read lock of hold, when there is one.
func (w *writer) held(f func() error) error {
	if w.hold != nil {
		w.hold.RLock()
		defer w.hold.RUnlock()
	}
	return f()
}

// pace waits, at a steady rate, until the next transaction is due.
func (w *writer) pace(ctx context.Context) {
	if w.rate <= 0 {
		return
	}
	now := time.Now()
	if w.due.Before(now.Add(-time.Second)) {
		w.due = now // behind after a fault: do not burst to catch up
	}
	w.due = w.due.Add(time.Duration(float64(w.last) / w.rate * float64(time.Second)))
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(w.due)):
	}
}

func (w *writer) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}

// transaction writes one transaction of 1-20 events; about 10% roll back and
// a third also write a table outside the publication. A commit whose outcome
// is unknown (the server went away) is resolved by looking for its rows.
func (w *writer) transaction(ctx context.Context, conn *pgx.Conn) error {
	n := 1 + w.rng.IntN(20)
	rows := make([]Committed, n)
	aggs := make([]string, n)
	seqs := make([]int, n)
	payloads := make([]string, n)
	next := map[string]int{}
	for i := range rows {
		agg := w.aggs[w.rng.IntN(len(w.aggs))]
		if _, ok := next[agg]; !ok {
			next[agg] = w.seq[agg]
		}
		next[agg]++
		rows[i] = Committed{Agg: agg, Seq: next[agg]}
		aggs[i], seqs[i] = agg, next[agg]
		payloads[i] = fmt.Sprintf(`{"agg": %q, "seq": %d, "writer": %d, "pad": "%s"}`, agg, next[agg], w.n, padding)
	}
	rollback := w.rng.IntN(10) == 0
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	ids := make([]int64, 0, n)
	qrows, err := tx.Query(ctx, `INSERT INTO outbox (aggregate_id, topic, payload, headers)
		SELECT a::uuid, $4, p::jsonb, jsonb_build_object('seq', s)
		FROM unnest($1::text[], $2::int[], $3::text[]) WITH ORDINALITY AS t(a, s, p, o) ORDER BY o
		RETURNING id`, aggs, seqs, payloads, w.topic)
	if err != nil {
		return err
	}
	for qrows.Next() {
		var id int64
		if err := qrows.Scan(&id); err != nil {
			qrows.Close()
			return err
		}
		ids = append(ids, id)
	}
	qrows.Close()
	if err := qrows.Err(); err != nil {
		return err
	}
	if len(ids) != n {
		return fmt.Errorf("inserted %d rows, want %d", len(ids), n)
	}
	// ids come back in insertion (ordinality) order: bigserial is assigned row by row.
	w.ledger.noteIDs(ids)
	if w.rng.IntN(3) == 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO chaos_other (note) VALUES ('not an event')`); err != nil {
			w.recordRolledBack(ids)
			return err
		}
	}
	if rollback {
		w.recordRolledBack(ids)
		w.ledger.rollback.Add(1)
		return tx.Rollback(ctx)
	}
	commitErr := tx.Commit(ctx)
	committed := commitErr == nil
	inFailover := commitErr != nil && w.ledger.failover.Load()
	if commitErr != nil && !errors.Is(commitErr, pgx.ErrTxCommitRollback) {
		// The outcome is unknown: the connection died around the commit.
		var err error
		if committed, err = w.resolve(ctx, ids[0], rows[0]); err != nil {
			return err
		}
	}
	if !committed && inFailover {
		// It may have committed on the old primary, and been published,
		// before the standby received it (see Result.LostInFailover).
		w.ledger.mu.Lock()
		w.ledger.lostInFailover = append(w.ledger.lostInFailover, ids...)
		w.ledger.mu.Unlock()
		return commitErr
	}
	if !committed {
		w.recordRolledBack(ids)
		return commitErr
	}
	for i := range rows {
		rows[i].ID = ids[i]
	}
	for agg, s := range next {
		w.seq[agg] = s
	}
	w.ledger.mu.Lock()
	w.ledger.committed = append(w.ledger.committed, rows...)
	w.ledger.mu.Unlock()
	w.ledger.events.Add(int64(n))
	w.last = n
	return commitErr
}

func (w *writer) recordRolledBack(ids []int64) {
	w.ledger.mu.Lock()
	w.ledger.rolledBack = append(w.ledger.rolledBack, ids...)
	w.ledger.mu.Unlock()
}

// resolve finds out whether the transaction that inserted id (as its
// first row, first) committed, retrying until PostgreSQL answers. The row
// must be this transaction's, not only its id: after a crash (immediate
// shutdown) a sequence can hand out again the values an uncommitted
// transaction had (their WAL record never reached the disk), so another
// writer's row may carry the id.
func (w *writer) resolve(ctx context.Context, id int64, first Committed) (bool, error) {
	for {
		conn, err := pgx.Connect(ctx, w.url)
		if err == nil {
			var exists bool
			err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox WHERE id = $1 AND aggregate_id = $2::uuid AND (payload->>'seq')::int = $3)`,
				id, first.Agg, first.Seq).Scan(&exists)
			conn.Close(context.Background())
			if err == nil {
				return exists, nil
			}
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// padding brings a payload to about 230 bytes, like the benchmarks' events.
const padding = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"

func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(cctx, url)
}
