package checkpoint

import (
	"fmt"
	"sync"

	"github.com/jackc/pglogrepl"
)

// LSN is a PostgreSQL WAL position.
type LSN = pglogrepl.LSN

// Txn identifies a transaction in a Tracker. The zero Txn is invalid.
type Txn uint64

type txn struct {
	pending   int  // records added but not yet acknowledged
	committed bool // Commit seen
	end       LSN  // end LSN, set at Commit
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
	records int // records in flight, over all queued transactions
}

// New returns a Tracker whose watermark starts at start (the slot's
// confirmed position, or 0 when unknown).
func New(start LSN) *Tracker {
	return &Tracker{head: 1, next: 1, flushed: start}
}

// Begin opens the next transaction in commit order. At most one transaction
// is open (begun, not committed) at a time: pgoutput v1 sends whole
// transactions one after another.
func (t *Tracker) Begin() (Txn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.queue); n > t.off && !t.queue[n-1].committed {
		return 0, fmt.Errorf("beginning a transaction while transaction %d is still open", t.next-1)
	}
	id := t.next
	t.next++
	t.queue = append(t.queue, txn{})
	return id, nil
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

// Ack records the acknowledgment of one record of x. An acknowledgment for a
// transaction already discarded by Reset is ignored.
func (t *Tracker) Ack(x Txn) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if x < t.head && x > 0 {
		return nil // discarded by Reset; nothing waits for it
	}
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

// Commit closes x with its end LSN (pgoutput's TransactionEndLSN). End LSNs
// must increase in commit order.
func (t *Tracker) Commit(x Txn, end LSN) error {
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
	tx.end = end
	t.advance()
	return nil
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

// InFlight returns the number of records not yet acknowledged and the
// number of transactions not yet confirmable.
func (t *Tracker) InFlight() (records, txns int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.records, len(t.queue) - t.off
}

// Reset discards every transaction not yet confirmable, keeping the
// watermark. It is used when the replication stream restarts: the server
// resends everything after the watermark, so the discarded transactions will
// come again. Late acknowledgments for them are ignored.
func (t *Tracker) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.queue = t.queue[:0]
	t.off = 0
	t.head = t.next
	t.records = 0
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
		t.flushed = t.queue[i].end
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
