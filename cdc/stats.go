package cdc

import (
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/checkpoint"
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
	State             State
	Transactions      uint64 // transactions received (committed ones; pgoutput sends no others)
	RecordsAcked      uint64 // records Kafka acknowledged
	BytesAcked        uint64 // key + value bytes of those
	InFlightRecords   int    // records handed to Kafka and not yet acknowledged
	Reconnects        uint64 // sessions that ended in a lost connection
	PermanentErrors   uint64 // permanent errors (Run returned with one)
	ConfirmedLSN      checkpoint.LSN
	ServerWALEnd      checkpoint.LSN // the server's WAL end as last reported to us
	NewestAckedCommit time.Time      // commit time of the newest acknowledged record
}

// LagBytes is the WAL not yet confirmed: server WAL end minus confirmed.
func (s Stats) LagBytes() uint64 {
	if s.ServerWALEnd <= s.ConfirmedLSN {
		return 0
	}
	return uint64(s.ServerWALEnd - s.ConfirmedLSN)
}

// LagSeconds is now minus the commit time of the newest acknowledged
// record while records are in flight, and 0 when everything received is
// acknowledged (an idle outbox is not behind).
func (s Stats) LagSeconds(now time.Time) float64 {
	if s.InFlightRecords == 0 || s.NewestAckedCommit.IsZero() {
		return 0
	}
	return max(0, now.Sub(s.NewestAckedCommit).Seconds())
}

// Observer learns about every acknowledged record (for metrics). It is
// called on the producer's callback goroutines and must be quick.
type Observer interface {
	Acknowledged(topic string, bytes int, produceLatency time.Duration, commitTime time.Time)
}

// counters are the Streamer's atomics behind Stats.
type counters struct {
	state           atomic.Int32
	transactions    atomic.Uint64
	recordsAcked    atomic.Uint64
	bytesAcked      atomic.Uint64
	reconnects      atomic.Uint64
	permanentErrors atomic.Uint64
	confirmed       atomic.Uint64
	serverWALEnd    atomic.Uint64
	newestCommit    atomic.Int64 // unix nanoseconds
	tracker         atomic.Pointer[checkpoint.Tracker]
}

// Stats returns a snapshot; safe to call from any goroutine.
func (s *Streamer) Stats() Stats {
	c := &s.counters
	st := Stats{
		State:           State(c.state.Load()),
		Transactions:    c.transactions.Load(),
		RecordsAcked:    c.recordsAcked.Load(),
		BytesAcked:      c.bytesAcked.Load(),
		Reconnects:      c.reconnects.Load(),
		PermanentErrors: c.permanentErrors.Load(),
		ConfirmedLSN:    checkpoint.LSN(c.confirmed.Load()),
		ServerWALEnd:    checkpoint.LSN(c.serverWALEnd.Load()),
	}
	if ns := c.newestCommit.Load(); ns != 0 {
		st.NewestAckedCommit = time.Unix(0, ns)
	}
	if tr := c.tracker.Load(); tr != nil {
		st.InFlightRecords, _ = tr.InFlight()
	}
	return st
}

func (c *counters) acked(bytes int, commit time.Time) {
	c.recordsAcked.Add(1)
	c.bytesAcked.Add(uint64(bytes))
	ns := commit.UnixNano()
	for {
		cur := c.newestCommit.Load()
		if ns <= cur || c.newestCommit.CompareAndSwap(cur, ns) {
			return
		}
	}
}
