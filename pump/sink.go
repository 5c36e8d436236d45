package pump

import (
	"context"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// Sink is where the pump hands records: package publish's producer, or an
// exactly-once producer that groups PostgreSQL transactions into Kafka
// transactions.
type Sink interface {
	// Publish hands over one record of the open transaction and returns
	// without waiting for it. done is called exactly once, from any
	// goroutine (possibly before Publish returns), with nil once the record
	// is durable (acknowledged; for a transactional sink, part of a
	// committed Kafka transaction) or with the error that failed it for
	// good.
	Publish(ev *outbox.Event, done func(error))
	// EndTxn marks the end of a PostgreSQL transaction: every record
	// published since the previous EndTxn belongs to it. A transactional
	// sink may commit here; every sink reports every record done in the
	// end, whether or not another EndTxn follows.
	EndTxn(ctx context.Context, c outbox.Commit) error
	// Abort fails every record not yet sent (done gets an error) and
	// returns once nothing is in flight, or when ctx ends.
	Abort(ctx context.Context) error
}

// Withdrawer is implemented by a Sink whose records could still be
// written after their pipeline gave up its replication slot: nothing
// fences an at-least-once producer, and a copy it writes after another
// replica took the slot over lands after that replica's newer records
// (on a compacted topic, a key's final value goes back). Withdraw fails
// every record it holds and has not seen acknowledged, and returns once
// none is left that Kafka may still accept, or with an error when ctx
// ends first. A transactional sink needs none: the next holder of its
// transactional id fences it.
type Withdrawer interface {
	Withdraw(ctx context.Context) error
}

// Renewer is implemented by a Sink whose state may be stale when a new
// stream starts: between two streams another process may have held the
// slot, and published (the exactly-once producer's resume position is
// then behind the progress topic's, and its producer fenced by the other
// one's). Start calls Renew before the stream's first record.
type Renewer interface {
	Renew()
}

// PositionOrdered is implemented by a Sink that needs every record in
// position order: it takes a record at or before the last one it was
// handed for one it already holds and reports it done without writing it
// (the exactly-once producer resumes that way). A dead letter is published
// after the records behind it, so New refuses a dead-letter topic with
// such a sink.
type PositionOrdered interface {
	NeedsPositionOrder() bool
}

// Observer learns about transactions read and records acknowledged or
// dead-lettered (metrics). It must be quick: Received is called on the
// reader's goroutine, the others on the sink's callback goroutines.
type Observer interface {
	// Received: a transaction's commit message was decoded; commitTime is
	// the server's commit time and sentTime when the walsender sent the
	// commit message (zero when unknown).
	Received(commitTime, sentTime time.Time)
	Acknowledged(topic string, bytes int, produceLatency time.Duration, commitTime time.Time)
	DeadLettered(topic string)
}
