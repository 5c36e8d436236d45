package cdc

import (
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/pump"
)

// State is where a Streamer is in its life.
type State int32

// States.
const (
	StateStarting     State = iota // checking the publication and slot, connecting
	StateStreaming                 // replication running
	StateStandby                   // the slot is in use by another process; waiting to take over
	StateReconnecting              // connection lost; backing off
	StateStopped                   // Run returned
)

func (s State) String() string {
	switch s {
	case StateStarting:
		return "starting"
	case StateStreaming:
		return "streaming"
	case StateStandby:
		return "standby"
	case StateReconnecting:
		return "reconnecting"
	case StateStopped:
		return "stopped"
	}
	return "unknown"
}

// Stats is a snapshot of a Streamer's counters and its pump's.
type Stats struct {
	pump.Stats
	State           State
	Reconnects      uint64 // sessions that ended in a lost connection
	PermanentErrors uint64 // permanent errors (Run returned with one)
	ConfirmedLSN    outbox.LSN
	ServerWALEnd    outbox.LSN // the server's WAL end as last reported to us
	// BackfillRows and BackfillTotal count the rows of the backfill this
	// process ran (--backfill-where) handed to Kafka so far, and all that
	// it matched; both 0 when there was none.
	BackfillRows, BackfillTotal int64
}

// LagBytes is the WAL not yet confirmed: server WAL end minus confirmed.
func (s Stats) LagBytes() uint64 {
	if s.ServerWALEnd <= s.ConfirmedLSN {
		return 0
	}
	return uint64(s.ServerWALEnd - s.ConfirmedLSN)
}

// LagSeconds is the replication lag in seconds. While records are in
// flight it is now minus the commit time of the oldest of them (in stream
// order): the age of the record Kafka has kept waiting longest, so a record
// waiting for minutes reads minutes, also before Kafka ever acknowledged
// one. When that record has no commit time (a dead letter of a row outside
// any transaction) it is now minus the commit time of the newest
// acknowledged record, or 0 before the first. When nothing is in flight it
// is 0: everything received is acknowledged (an idle outbox is not behind).
func (s Stats) LagSeconds(now time.Time) float64 {
	switch {
	case s.InFlightRecords == 0:
		return 0
	case !s.OldestInFlightCommit.IsZero():
		return max(0, now.Sub(s.OldestInFlightCommit).Seconds())
	case !s.NewestAckedCommit.IsZero():
		return max(0, now.Sub(s.NewestAckedCommit).Seconds())
	}
	return 0
}

// counters are the Streamer's atomics behind Stats.
type counters struct {
	state           atomic.Int32
	reconnects      atomic.Uint64
	permanentErrors atomic.Uint64
	confirmed       atomic.Uint64
	serverWALEnd    atomic.Uint64
	backfillDone    atomic.Int64
	backfillTotal   atomic.Int64
}

// Stats returns a snapshot; safe to call from any goroutine.
func (s *Streamer) Stats() Stats {
	c := &s.counters
	return Stats{
		Stats:           s.pump.Stats(),
		State:           State(c.state.Load()),
		Reconnects:      c.reconnects.Load(),
		PermanentErrors: c.permanentErrors.Load(),
		ConfirmedLSN:    outbox.LSN(c.confirmed.Load()),
		ServerWALEnd:    outbox.LSN(c.serverWALEnd.Load()),
		BackfillRows:    c.backfillDone.Load(),
		BackfillTotal:   c.backfillTotal.Load(),
	}
}
