package cdc

import (
	"sync/atomic"

	"github.com/outboxd/outboxd/outbox"
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

// Stats is a snapshot of a Streamer's counters.
type Stats struct {
	State        State
	Reconnects   uint64 // sessions that ended in a lost connection
	ConfirmedLSN outbox.LSN
	ServerWALEnd outbox.LSN // the server's WAL end as last reported to us
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

// counters are the Streamer's atomics behind Stats.
type counters struct {
	state         atomic.Int32
	reconnects    atomic.Uint64
	confirmed     atomic.Uint64
	serverWALEnd  atomic.Uint64
	backfillDone  atomic.Int64
	backfillTotal atomic.Int64
}

// Stats returns a snapshot; safe to call from any goroutine.
func (s *Streamer) Stats() Stats {
	c := &s.counters
	return Stats{
		State:         State(c.state.Load()),
		Reconnects:    c.reconnects.Load(),
		ConfirmedLSN:  outbox.LSN(c.confirmed.Load()),
		ServerWALEnd:  outbox.LSN(c.serverWALEnd.Load()),
		BackfillRows:  c.backfillDone.Load(),
		BackfillTotal: c.backfillTotal.Load(),
	}
}
