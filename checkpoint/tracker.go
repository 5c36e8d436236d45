package checkpoint

import (
	"fmt"
	"sync"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// LSN is a PostgreSQL WAL position.
type LSN = outbox.LSN

// Txn identifies a transaction in a Tracker. The zero Txn is invalid.
type Txn uint64

type txn struct {
	pending   int  // records added but not yet acknowledged
	committed bool // Commit seen
	end       LSN  // end LSN, set at Commit
	at        time.Time
}

// Tracker is the acknowledgment watermark. The zero value is not usable; use
// New.
type Tracker struct {
	mu      sync.Mutex
	queue   []txn // open or incomplete transactions in commit order, from queue[off]
	off     int   // index of the oldest queued transaction
	head    Txn   // Txn of queue[off]
	next    Txn   // Txn the next Begin returns
	flushed LSN
	at      time.Time // commit time of the newest transaction at or below flushed
	records int       // records in flight, over all queued transactions
}

// New returns a Tracker whose watermark starts at start (the slot's
// confirmed position, or 0 when unknown).
func New(start LSN) *Tracker {
	return &Tracker{head: 1, next: 1, flushed: start}
}

// Begin opens the next transaction in commit order. The caller keeps the
// transaction frame (at most one transaction open at a time, as pgoutput v1
// sends them): package decode checks it on the stream, so the Tracker does
// not check it again.
func (t *Tracker) Begin() Txn {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := t.next
	t.next++
	t.queue = append(t.queue, txn{})
	return id
}

// Add counts one more record of the open transaction x as in flight. It must
// be called before the record can possibly be acknowledged.
func (t *Tracker) Add(x Txn) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	tx, err := t.lookup(x)
	if err != nil {
		return err
	}
	if tx.committed {
		return fmt.Errorf("adding a record to transaction %d after its commit", x)
	}
	tx.pending++
	t.records++
	return nil
}

// Ack records the acknowledgment of one record of x.
func (t *Tracker) Ack(x Txn) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	tx, err := t.lookup(x)
	if err != nil {
		return err
	}
	if tx.pending == 0 {
		return fmt.Errorf("acknowledging more records than transaction %d has", x)
	}
	tx.pending--
	t.records--
	t.advance()
	return nil
}

// Commit closes x with its end LSN (pgoutput's TransactionEndLSN) and its
// commit time. End LSNs must increase in commit order.
func (t *Tracker) Commit(x Txn, end LSN, at time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	tx, err := t.lookup(x)
	if err != nil {
		return err
	}
	if tx.committed {
		return fmt.Errorf("committing transaction %d twice", x)
	}
	if last := t.lastEnd(); end <= last {
		return fmt.Errorf("transaction %d ends at %s, not after the previous end %s", x, end, last)
	}
	tx.committed = true
	tx.end, tx.at = end, at
	t.coalesce(x)
	t.advance()
	return nil
}

// coalesce folds x, just committed, into the transaction before it when
// both are committed and have nothing in flight: the watermark passes both
// at once anyway. So transactions without events (other tables'
// changes, updates, deletes) that commit behind a record Kafka has not
// acknowledged cost no memory while Kafka stalls. x is the newest Txn (one
// is open at a time) and nothing refers to it any more (it has no
// records): the next Begin returns it again.
func (t *Tracker) coalesce(x Txn) {
	n := len(t.queue)
	if n-t.off < 2 || x != t.next-1 {
		return
	}
	last, prev := &t.queue[n-1], &t.queue[n-2]
	if last.pending != 0 || !prev.committed || prev.pending != 0 {
		return
	}
	prev.end, prev.at = last.end, last.at
	t.queue = t.queue[:n-1]
	t.next--
}

// Idle moves the watermark to the server's WAL end when nothing is in
// flight and no transaction is open or incomplete, so that an idle outbox
// does not pin WAL. It reports whether the watermark moved.
//
// Safety: the caller has processed every message the server sent before the
// keepalive carrying walEnd; any transaction still running on the server
// commits after walEnd and will be sent after a restart from there.
func (t *Tracker) Idle(walEnd LSN) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) > t.off || walEnd <= t.flushed {
		return false
	}
	t.flushed = walEnd
	return true
}

// Flushed returns the confirmable position: see the package doc.
func (t *Tracker) Flushed() LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flushed
}

// FlushedCommitTime returns the commit time of the newest transaction the
// watermark passed (zero before the first): every transaction committed
// before it in commit order is acknowledged.
func (t *Tracker) FlushedCommitTime() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.at
}

// InFlight returns the number of records not yet acknowledged and the
// number of transactions not yet confirmable.
func (t *Tracker) InFlight() (records, txns int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.records, len(t.queue) - t.off
}

func (t *Tracker) lookup(x Txn) (*txn, error) {
	if x < t.head || x >= t.next {
		return nil, fmt.Errorf("unknown transaction %d (tracking %d to %d)", x, t.head, t.next-1)
	}
	return &t.queue[t.off+int(x-t.head)], nil
}

// lastEnd is the end LSN of the newest committed transaction known.
func (t *Tracker) lastEnd() LSN {
	for i := len(t.queue) - 1; i >= t.off; i-- {
		if t.queue[i].committed {
			return t.queue[i].end
		}
	}
	return t.flushed
}

// advance pops complete transactions off the front of the queue.
func (t *Tracker) advance() {
	i := t.off
	for i < len(t.queue) && t.queue[i].committed && t.queue[i].pending == 0 {
		t.flushed, t.at = t.queue[i].end, t.queue[i].at
		i++
	}
	t.head += Txn(i - t.off)
	t.off = i
	// Compact once the consumed front is at least half the slice, so the
	// backing array stays about as long as the in-flight window (amortized O(1)).
	if t.off > 0 && t.off*2 >= len(t.queue) {
		t.queue = t.queue[:copy(t.queue, t.queue[t.off:])]
		t.off = 0
	}
}
