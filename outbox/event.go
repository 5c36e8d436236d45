package outbox

import (
	"errors"
	"strconv"
	"time"
)

// Event is one outbox row, ready to become a Kafka record (see the record
// contract in docs/design.md). Its byte slices are its own: they alias
// nothing the producer of the Event keeps using.
type Event struct {
	Table string // schema-qualified source table, e.g. "public.outbox"
	Topic string // the Kafka topic
	Key   []byte // aggregate id in text form; nil when NULL
	Value []byte // payload as stored; nil when NULL (a tombstone)
	// Headers[0] is {"id", the outbox id in text form} (see ID); then,
	// when the stream's server is known, {"outboxd.source", where the
	// event comes from} (SourceHeader); then the headers of the
	// mapping and one per member of the row's headers object, in the order
	// of its text.
	Headers    []Header
	CommitTime time.Time // the transaction's commit time
	// Timestamp is the record timestamp when the table maps a timestamp
	// column and the row has one; zero: the record timestamp is CommitTime.
	Timestamp time.Time
	CommitLSN LSN // the LSN of the transaction's commit record
	Index     int // 0-based position among the events of the transaction
}

// ID returns the outbox id, the idempotency key: the value of the first
// header when it is the "id" header (decimal for an integer id column, the
// text form of a uuid or text one), "" when the event has none (a
// dead-letter record of a row whose id could not be read).
func (e *Event) ID() string {
	if len(e.Headers) > 0 && e.Headers[0].Key == "id" {
		return string(e.Headers[0].Value)
	}
	return ""
}

// Size is what the event weighs in Kafka's terms: key, value, and every
// header's key and value, in bytes. The in-flight byte cap counts it.
func (e *Event) Size() int {
	n := len(e.Key) + len(e.Value)
	for _, h := range e.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// RecordTime is the record timestamp: Timestamp, or CommitTime when the
// row gave none.
func (e *Event) RecordTime() time.Time {
	if e.Timestamp.IsZero() {
		return e.CommitTime
	}
	return e.Timestamp
}

// Header is one Kafka record header. A nil Value is a null header value
// (a NULL header column); an empty one is the empty string.
type Header struct {
	Key   string
	Value []byte
}

// Begin starts a transaction in the stream.
type Begin struct {
	Xid        uint32
	CommitLSN  LSN // the LSN its commit record will have
	CommitTime time.Time
}

// Commit ends a transaction. Once every event of this transaction and of
// every earlier one is durable in Kafka, EndLSN may be confirmed.
type Commit struct {
	CommitLSN  LSN
	EndLSN     LSN // the end of the commit record: the confirmable position
	CommitTime time.Time
	// SentTime is when the walsender sent the commit (its XLogData
	// header's server clock); zero when not known (a backfill).
	SentTime time.Time
}

// ChangeKind says what a Change is.
type ChangeKind uint8

// The kinds of Change.
const (
	ChangeBegin  ChangeKind = iota + 1 // Change.Begin: a transaction starts
	ChangeEvent                        // Change.Event: one of its events
	ChangeCommit                       // Change.Commit: it ends
)

// Change is one step of the committed stream, in order: a transaction's
// Begin, one of its Events, or its Commit. Which field is set depends on
// Kind.
type Change struct {
	Kind   ChangeKind
	Begin  Begin
	Event  Event
	Commit Commit
}

// ErrRecordTooLarge is matched (errors.Is) by every error that says a
// record is larger than a limit on its way to Kafka, whichever side (client
// or broker) enforced it.
var ErrRecordTooLarge = errors.New("record too large")

// ErrTransactionAborted is matched (errors.Is) by every error that fails a
// record because the Kafka transaction it was part of was aborted, not
// because of the record itself: such a record is never dead-lettered (the
// transaction's other records failed with it, and none of them is in Kafka
// for a read_committed consumer).
var ErrTransactionAborted = errors.New("Kafka transaction aborted")

// Position is where an event is in the stream: (CommitLSN, Index), unique
// and increasing in commit order. The exactly-once sink records the last
// position it committed and skips every event at or before it.
type Position struct {
	CommitLSN LSN
	Index     int
}

// Position returns the event's position.
func (e *Event) Position() Position { return Position{CommitLSN: e.CommitLSN, Index: e.Index} }

// Before reports whether p comes before q in the stream.
func (p Position) Before(q Position) bool {
	return p.CommitLSN < q.CommitLSN || p.CommitLSN == q.CommitLSN && p.Index < q.Index
}

func (p Position) String() string { return p.CommitLSN.String() + "#" + strconv.Itoa(p.Index) }
