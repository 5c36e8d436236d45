package pipeline

import (
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/registry"
	"github.com/outboxd/outboxd/slot"
)

// State is where a pipeline is in its life: its stream's state while it
// runs (starting, streaming, standby, reconnecting, stopped), or what a
// supervisor running it says (package fleet's "backing off").
type State string

// The states of a running pipeline: its stream's (cdc.State's text).
const (
	StateStarting     State = "starting"     // checking the publication and slot, connecting
	StateStreaming    State = "streaming"    // replication running
	StateStandby      State = "standby"      // the slot is in use by another process; waiting to take over
	StateReconnecting State = "reconnecting" // connection lost; backing off
	StateStopped      State = "stopped"      // not running
	StatePaused       State = "paused"       // Config.Paused: reading nothing, the slot kept and watched
)

// States lists the states of a running pipeline.
func States() []State {
	return []State{StateStarting, StateStreaming, StateStandby, StateReconnecting, StateStopped, StatePaused}
}

// Status is everything a pipeline reports, read at one moment: what
// metrics, health checks and status pages show. Each stage's part is its
// own snapshot; a stage the pipeline does not have reads zero.
type Status struct {
	State State
	// Detail says why, when a supervisor has something to say (the error
	// the pipeline failed with and when it starts again), or since when
	// a paused pipeline is paused.
	Detail string
	// PausedSince is when the paused pipeline (Config.Paused) started to
	// stand paused; zero for one that is not.
	PausedSince time.Time
	Stream      cdc.Stats  // state, reconnects, confirmed position, server WAL end, backfill
	Window      pump.Stats // records in flight, acknowledged, dead-lettered; transactions
	Sink        SinkStatus
	// Registry counts the records the schema-registry stage encoded and
	// refused (zero without a schema format).
	Registry registry.Stats
	// Kafka is whether Kafka answers the pipeline's clients.
	Kafka KafkaStatus
	// RetainedWAL is the WAL the slot retains on the server, -1 when
	// unknown.
	RetainedWAL int64
	// Decoding is which server decodes the slot (slot.DecodingPrimary,
	// slot.DecodingStandby; slot.DecodingUnknown before the first check).
	Decoding int
	// Heartbeats counts the heartbeat messages written.
	Heartbeats uint64
	// PermanentErrors counts the runs that stopped with an error, Panics
	// those of them that were a panic (a bug), and LastError is the last
	// one's text: a supervisor counts them across the runs it restarted.
	PermanentErrors, Panics uint64
	LastError               string
}

// SinkStatus is what the sink counts.
type SinkStatus struct {
	DataLoss uint64 // times Kafka reported losing records it had acknowledged
	// With exactly-once delivery: Kafka transactions committed, and
	// records not sent again because a committed one held them.
	KafkaTransactions, SkippedRecords uint64
	// HangingSince: with exactly-once delivery, when the last stable
	// offset of a progress topic partition stopped below its high
	// watermark, once for longer than the transaction timeout (a hanging
	// transaction); zero otherwise.
	HangingSince time.Time
}

// KafkaStatus is the Kafka clients' reachability (publish.Reachability).
type KafkaStatus struct {
	ConnectionErrors uint64 // dials and requests that failed
	// UnreachableSince is when the first of them failed after the last
	// that succeeded; zero while the last one succeeded.
	UnreachableSince time.Time
}

// Status returns the pipeline's status now; safe from any goroutine.
func (p *Pipeline) Status() Status {
	st := Status{
		Stream:      p.stream.Stats(),
		Window:      p.pump.Stats(),
		Sink:        SinkStatus{DataLoss: p.sink.DataLossEvents()},
		Kafka:       kafkaStatus(p.reach),
		RetainedWAL: p.wal.Retained(),
		Decoding:    p.wal.Decoding(),
	}
	st.State = State(st.Stream.State.String())
	if p.cfg.Paused {
		// The stream reads nothing: the slot's positions are the WAL
		// check's, so that the lag shows what waits.
		st.Stream.ConfirmedLSN, st.Stream.ServerWALEnd = p.wal.Positions()
		st.State = StatePaused
		if since := p.pausedSince.Load(); since != nil {
			st.PausedSince = *since
			st.Detail = "paused since " + since.UTC().Format(time.RFC3339)
		}
	}
	if p.txn != nil {
		ts := p.txn.Stats()
		st.Sink.KafkaTransactions, st.Sink.SkippedRecords, st.Sink.HangingSince = ts.Committed, ts.Skipped, ts.HangingSince
	}
	if p.reg != nil {
		st.Registry = p.reg.Stats()
	}
	if p.hb != nil {
		st.Heartbeats = p.hb.Written()
	}
	st.PermanentErrors = p.failed.Load()
	return st
}

func kafkaStatus(r *publish.Reachability) KafkaStatus {
	return KafkaStatus{ConnectionErrors: r.ConnectionErrors(), UnreachableSince: r.UnreachableSince()}
}

// LagBytes is the WAL not yet confirmed: server WAL end minus confirmed.
func (s Status) LagBytes() uint64 { return s.Stream.LagBytes() }

// OnStandby reports whether the slot is decoded on a physical standby, as
// the last check of the slot found its server.
func (s Status) OnStandby() bool { return s.Decoding == slot.DecodingStandby }

// LagSeconds is the replication lag in seconds. While records are in
// flight it is now minus the commit time of the oldest of them (in stream
// order): the age of the record Kafka has kept waiting longest, so a record
// waiting for minutes reads minutes, also before Kafka ever acknowledged
// one. When that record has no commit time (a dead letter of a row outside
// any transaction) it is now minus the commit time of the newest
// acknowledged record, or 0 before the first. When nothing is in flight it
// is 0: everything received is acknowledged (an idle outbox is not behind).
func (s Status) LagSeconds(now time.Time) float64 {
	w := s.Window
	switch {
	case w.InFlightRecords == 0:
		return 0
	case !w.OldestInFlightCommit.IsZero():
		return max(0, now.Sub(w.OldestInFlightCommit).Seconds())
	case !w.NewestAckedCommit.IsZero():
		return max(0, now.Sub(w.NewestAckedCommit).Seconds())
	}
	return 0
}
