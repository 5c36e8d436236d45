package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/slot"
)

// handoverChannel is the notification channel of the hand-over protocol:
// a payload that is a slot's name asks its holder to hand it over; one of
// "released:" and the name says its holder let it go gracefully. Any role
// of the database may notify, so each is acted on only when outboxd_slots
// (which only outboxd's role writes) holds a fresh record backing it.
const handoverChannel = "outboxd_handover"

// releasedPrefix marks a release's payload.
const releasedPrefix = "released:"

// handover is one pipeline's side of the hand-over protocol on one
// replica. The replica ranked first claims (records a request, notifies)
// while it stands by; the one streaming hands over on a backed claim. A
// replica that lets the slot go gracefully records whom it goes to (the
// replica ranked next) and notifies: that one, standing by, takes it at
// once instead of after its slot retry and rank's delay. A lost claim or
// release is made up for by the next claim, or the standby's next retry.
type handover struct {
	slot, url string
	name      string // the connections' application_name (slot.AppName)
	replica   int
	every     time.Duration
	log       *slog.Logger
}

// fresh is how long a recorded claim or release is acted on.
func (h handover) fresh() time.Duration { return 3*h.every + 5*time.Second }

// claim asks for the pipeline back every h.every while p stands by (the
// slot is held by another replica) and Kafka answers p's client (a
// replica that could not publish must not take the pipeline from one
// that can). It returns when ctx ends.
func (h handover) claim(ctx context.Context, p *pipeline.Pipeline) {
	claimed := false
	for sleep(ctx, h.every) {
		if p.Status().State != pipeline.StateStandby {
			claimed = false
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, h.every)
		err := p.Ping(pctx)
		cancel()
		if err != nil {
			continue
		}
		if err := h.send(ctx, h.slot, func(conn *pgx.Conn) error { return slot.RequestHandover(ctx, conn, h.slot, h.replica) }); err != nil {
			if ctx.Err() == nil {
				h.log.Warn("asking the replica that holds the pipeline to hand it over; trying again", "slot", h.slot, "err", err, "retry_in", h.every)
			}
			continue
		}
		if !claimed {
			h.log.Info("this replica is ranked first for the pipeline and stands by: asking the replica that holds it to hand it over", "slot", h.slot)
			claimed = true
		}
	}
}

// release records that this replica let the slot go gracefully, for
// replica to, and tells it.
func (h handover) release(ctx context.Context, to int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.send(ctx, releasedPrefix+h.slot, func(conn *pgx.Conn) error { return slot.RecordRelease(ctx, conn, h.slot, to) }); err != nil {
		h.log.Warn("telling the replica ranked next that the slot was let go (it takes it over after its rank's delay instead)", "slot", h.slot, "to_replica", to, "err", err)
		return
	}
	h.log.Info("slot let go gracefully: the replica ranked next takes it over at once", "slot", h.slot, "to_replica", to)
}

// send records (write) and then notifies payload on a connection of its
// own.
func (h handover) send(ctx context.Context, payload string, write func(*pgx.Conn) error) error {
	cctx, cancel := context.WithTimeout(ctx, max(h.every, 5*time.Second))
	defer cancel()
	conn, err := slot.Connect(cctx, h.url, h.name)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := write(conn); err != nil {
		return err
	}
	if _, err := conn.Exec(cctx, `SELECT pg_catalog.pg_notify($1, $2)`, handoverChannel, payload); err != nil {
		return fmt.Errorf("notifying %s: %w", handoverChannel, err)
	}
	return nil
}

// listen reports true when, while p streams, a replica's claim for the
// pipeline arrives (backed by its record), false when ctx ended first;
// while p stands by, a release naming this replica makes it take the slot
// at once. A lost listening connection is opened again after h.every.
func (h handover) listen(ctx context.Context, p *pipeline.Pipeline) bool {
	for {
		claimed, err := h.listenOnce(ctx, p)
		switch {
		case claimed:
			return true
		case ctx.Err() != nil:
			return false
		}
		h.log.Warn("listening for hand-over requests; trying again", "slot", h.slot, "err", err, "retry_in", h.every)
		if !sleep(ctx, h.every) {
			return false
		}
	}
}

// awaitRelease waits d, or less when the slot was, or is while it waits,
// let go gracefully for this replica: a replica's wait
// by its rank before it first tries the pipeline ends at once when the
// replica holding the slot stops. It reports false when ctx ended first.
func (h handover) awaitRelease(ctx context.Context, d time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	released, err := h.awaitReleaseOnce(wctx)
	switch {
	case released:
		h.log.Info("the replica that held the slot let it go for this one: trying it at once", "slot", h.slot)
		return true
	case err != nil && wctx.Err() == nil:
		// Without the notification, the rank's delay is all there is.
		h.log.Warn("listening for the slot's release while waiting by the rank; waiting the whole delay", "slot", h.slot, "err", err)
	}
	<-wctx.Done()
	return ctx.Err() == nil
}

func (h handover) awaitReleaseOnce(ctx context.Context) (bool, error) {
	conn, err := h.listening(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Listening first, then reading the record: a release is either
	// recorded already or notified after.
	for payload := ""; ; {
		if payload == releasedPrefix+h.slot || payload == "" {
			ok, err := slot.ReleasedTo(ctx, conn, h.slot, h.replica, h.fresh())
			if ok || err != nil {
				return ok, err
			}
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return false, fmt.Errorf("waiting for a notification on %s: %w", handoverChannel, err)
		}
		payload = n.Payload
	}
}

// listening opens a connection that listens on handoverChannel.
func (h handover) listening(ctx context.Context) (*pgx.Conn, error) {
	conn, err := slot.Connect(ctx, h.url, h.name)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+handoverChannel); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("listening on %s: %w", handoverChannel, err)
	}
	return conn, nil
}

func (h handover) listenOnce(ctx context.Context, p *pipeline.Pipeline) (bool, error) {
	conn, err := h.listening(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return false, fmt.Errorf("waiting for a notification on %s: %w", handoverChannel, err)
		}
		state := p.Status().State
		switch {
		case n.Payload == h.slot && state == pipeline.StateStreaming:
			ok, by, err := slot.HandoverRequested(ctx, conn, h.slot, h.replica, h.fresh())
			switch {
			case err != nil:
				h.log.Warn("a hand-over request for the slot could not be checked against outboxd_slots: ignored", "slot", h.slot, "err", err)
			case !ok:
				h.log.Warn("a hand-over request for the slot without a replica's record of it in outboxd_slots: ignored (any role of the database may notify; only outboxd's may write that record)",
					"slot", h.slot)
			default:
				h.log.Info("the replica ranked first for the pipeline asked for it", "slot", h.slot, "by_replica", by)
				return true, nil
			}
		case strings.TrimPrefix(n.Payload, releasedPrefix) == h.slot && n.Payload != h.slot && state == pipeline.StateStandby:
			ok, err := slot.ReleasedTo(ctx, conn, h.slot, h.replica, h.fresh())
			if err != nil && !errors.Is(err, context.Canceled) {
				h.log.Warn("a release of the slot could not be checked against outboxd_slots: taking it after the rank's delay", "slot", h.slot, "err", err)
			}
			if ok {
				h.log.Info("the replica that held the slot let it go for this one: taking it at once", "slot", h.slot)
				p.TakeNow()
			}
		}
	}
}
