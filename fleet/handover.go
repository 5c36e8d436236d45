package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/slot"
)

// handoverChannel is the notification channel on which a replica ranked
// first for a pipeline asks for it back; the payload is the slot's name
// (unique in its database, which scopes notifications).
const handoverChannel = "outboxd_handover"

// handover is one pipeline's side of the hand-over protocol. The replica
// ranked first claims (notifies) while it stands by; the others listen
// while they stream, and hand over on a claim. A lost claim is sent again
// after every, so nothing depends on one notification arriving.
type handover struct {
	slot, url string
	every     time.Duration
	log       *slog.Logger
}

// claim asks for the pipeline back every h.every while p stands by (the
// slot is held by another replica) and Kafka answers p's client (a
// replica that could not publish must not take the pipeline from one
// that can). It returns when ctx ends.
func (h handover) claim(ctx context.Context, p *pipeline.Pipeline) {
	claimed := false
	for sleep(ctx, h.every) {
		if p.Stream().Stats().State != cdc.StateStandby {
			claimed = false
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, h.every)
		err := p.Ping(pctx)
		cancel()
		if err != nil {
			continue
		}
		if err := h.notify(ctx); err != nil {
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

func (h handover) notify(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, max(h.every, 5*time.Second))
	defer cancel()
	conn, err := slot.Connect(cctx, h.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(cctx, `SELECT pg_catalog.pg_notify($1, $2)`, handoverChannel, h.slot); err != nil {
		return fmt.Errorf("notifying %s: %w", handoverChannel, err)
	}
	return nil
}

// listen reports true when the replica ranked first claims the pipeline
// while p streams, false when ctx ended first. A lost listening connection
// is opened again after h.every.
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

func (h handover) listenOnce(ctx context.Context, p *pipeline.Pipeline) (bool, error) {
	conn, err := slot.Connect(ctx, h.url)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+handoverChannel); err != nil {
		return false, fmt.Errorf("listening on %s: %w", handoverChannel, err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return false, fmt.Errorf("waiting for a notification on %s: %w", handoverChannel, err)
		}
		if n.Payload == h.slot && p.Stream().Stats().State == cdc.StateStreaming {
			return true, nil
		}
	}
}
