package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/decode"
)

// Publisher is what the stream needs from Kafka (see package publish).
type Publisher interface {
	// Publish hands over one event; done is called exactly once, with nil
	// when Kafka acknowledged it, else with the error that failed it for
	// good. It may block (in-flight limits); ctx bounds the wait.
	Publish(ctx context.Context, ev *decode.Event, done func(error))
	// Flush waits until every published event is done or ctx ends.
	Flush(ctx context.Context) error
}

// Streamer streams the publication's inserts to a Publisher. Run it once.
type Streamer struct {
	cfg Config
	pub Publisher
	log *slog.Logger

	// confirmed is the newest position this process confirmed, carried
	// across reconnects so a new session starts where the last one ended.
	confirmed checkpoint.LSN
	counters  counters
	observer  Observer
}

// New returns a Streamer. cfg's zero fields take their defaults.
func New(cfg Config, pub Publisher, log *slog.Logger) *Streamer {
	return &Streamer{cfg: cfg.WithDefaults(), pub: pub, log: log}
}

// Observe sets an Observer of acknowledged records. Call before Run.
func (s *Streamer) Observe(o Observer) { s.observer = o }

// Run streams until ctx ends (then drains and returns nil) or a permanent
// error occurs (returned). Lost connections and a slot held by another
// process are retried.
func (s *Streamer) Run(ctx context.Context) error {
	if err := s.cfg.validate(); err != nil {
		return err
	}
	defer s.counters.state.Store(int32(StateStopped))
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(250*time.Millisecond),
		backoff.WithMaxInterval(s.cfg.ReconnectMaxInterval),
		backoff.WithMaxElapsedTime(0),
	)
	waitingForSlot := false
	for {
		s.counters.state.Store(int32(StateStarting))
		streamed, err := s.session(ctx)
		if IsPermanent(err) {
			s.counters.permanentErrors.Add(1)
			return err
		}
		if ctx.Err() != nil {
			s.log.Info("stopped", "slot", s.cfg.Slot, "confirmed_lsn", s.confirmed)
			return nil
		}
		var inUse *slotInUseError
		var wait time.Duration
		switch {
		case errors.As(err, &inUse):
			if !waitingForSlot {
				s.log.Info("replication slot is in use by another process; standing by to take over",
					"slot", s.cfg.Slot, "active_pid", inUse.pid, "retry_interval", s.cfg.SlotRetryInterval)
				waitingForSlot = true
			}
			wait = s.cfg.SlotRetryInterval
			s.counters.state.Store(int32(StateStandby))
		default:
			s.counters.reconnects.Add(1)
			s.counters.state.Store(int32(StateReconnecting))
			if streamed {
				bo.Reset()
			}
			wait = bo.NextBackOff()
			s.log.Warn("replication interrupted; reconnecting", "slot", s.cfg.Slot, "err", err, "retry_in", wait)
		}
		if streamed {
			waitingForSlot = false
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.log.Info("stopped", "slot", s.cfg.Slot, "confirmed_lsn", s.confirmed)
			return nil
		case <-t.C:
		}
	}
}

// session runs one replication connection from start to end. streamed
// reports whether replication started (for backoff and logging).
func (s *Streamer) session(ctx context.Context) (streamed bool, err error) {
	slot, err := s.prepare(ctx)
	if err != nil {
		return false, err
	}
	conn, err := s.connectReplication(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx) // the session's outcome is already decided
	}()
	start := max(s.confirmed, slot.ConfirmedFlushLSN)
	st := newStream(s, conn, checkpoint.New(start))
	if err := st.start(ctx, start); err != nil {
		if inUse, ok := asSlotInUse(s.cfg.Slot, err); ok {
			return false, inUse
		}
		if isObjectNotInPrerequisiteState(err) { // e.g. an invalidated slot
			return false, permanent(fmt.Errorf("starting replication on slot %s: %w", s.cfg.Slot, err))
		}
		return false, fmt.Errorf("starting replication on slot %s: %w", s.cfg.Slot, err)
	}
	s.log.Info("streaming", "slot", s.cfg.Slot, "publication", s.cfg.Publication, "lsn", start)
	s.counters.state.Store(int32(StateStreaming))
	s.counters.tracker.Store(st.tr)
	s.counters.confirmed.Store(uint64(start))
	err = st.run(ctx)
	s.confirmed = max(s.confirmed, st.confirmed)
	return true, err
}
