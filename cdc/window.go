package cdc

import (
	"context"

	"github.com/outboxd/outboxd/outbox"
)

// Watermark is the position a session may confirm: the reader sends it
// as the standby status (package pump's Pump, backed by a
// checkpoint.Tracker).
type Watermark interface {
	Flushed() outbox.LSN
	// Idle reports a keepalive's WAL end: confirmable while nothing is in
	// flight and no transaction is open.
	Idle(walEnd outbox.LSN)
}

// Window is what the stream needs of the records its changes became on
// their way to Kafka (package pump's Pump): where each session starts,
// what it may confirm, and how it ends. The pipeline runs the window;
// the stream only reads and settles it.
type Window interface {
	Watermark
	// Start begins a session (or a backfill, from 0) whose watermark
	// starts at from.
	Start(from outbox.LSN)
	// Drain waits until every record handed on is done, or ctx ends (its
	// error). Err then says whether one failed for good.
	Drain(ctx context.Context) error
	Err() error
	Releaser
}

// Releaser settles what a session that ends leaves in flight, before its
// slot is given up (see Streamer's drain).
type Releaser interface {
	// Withdraws reports whether the records still unacknowledged must be
	// withdrawn (the sink could write them later); Withdraw does it.
	Withdraws() bool
	Withdraw(ctx context.Context) error
	// InFlight is what is still unacknowledged, for the logs.
	InFlight() (records, bytes int)
}
