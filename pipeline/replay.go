package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/slot"
)

// Replay is a replay's way to Kafka (outboxd replay): the pipeline's
// stages with a cdc.Replayer reading the table in the place of the
// stream: replayer → [registry] → pump → sink. It uses the pipeline's
// Kafka, pump, delivery and schema settings, so that a replayed record
// is the record the stream made, plus the replay's header. With
// exactly-once delivery it writes Kafka transactions of its own, under a
// transactional id of its own (see NewReplay), never the pipeline's.
type Replay struct {
	log *slog.Logger
	*downstream
	source *cdc.Replayer
}

// NewReplay builds the Replay of rc with cfg's Kafka, pump, delivery and
// schema settings (its stream's are not used: rc says what to read). With
// exactly-once delivery the transactional id is cfg.Txn.TransactionalID
// with "-replay-<name>" added, or without one
// outboxd-replay-<name>-<system identifier>; its progress is kept on the
// pipeline's progress topic under a key of its own. It does no I/O.
func NewReplay(cfg Config, rc cdc.ReplayConfig, log *slog.Logger) (*Replay, error) {
	cfg = cfg.named()
	var problems []error
	problems = append(problems, cfg.Problems()...)
	if err := rc.Validate(); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	rc = rc.WithDefaults()
	txn := cfg.Txn
	if txn.TransactionalID != "" {
		txn.TransactionalID += "-replay-" + rc.Name
	}
	// The key names the system only: a replay's positions are its pages,
	// the same on any timeline of the system.
	identify := func(ctx context.Context) (publish.Server, error) {
		id, err := slot.Identify(ctx, rc.DatabaseURL)
		return publish.Server{SystemID: id.SystemID}, err
	}
	d, err := buildDownstream(cfg, txn, "replay-"+rc.Name, identify, log)
	if err != nil {
		return nil, err
	}
	r := &Replay{log: log, downstream: d}
	first := r.first()
	if r.source, err = cdc.NewReplayer(rc, first, r.pump, log); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Progress is the replay's progress (cdc.Replayer.Progress).
func (r *Replay) Progress() cdc.ReplayProgress { return r.source.Progress() }

// Run replays until every selected row is acknowledged (nil), ctx ends
// (nil: what Kafka acknowledged is recorded, and the same replay resumes
// there), or a stage fails (its error). It closes the Kafka client before
// it returns. Call it once.
func (r *Replay) Run(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = contain.Recovered("running the replay", v)
		}
	}()
	defer r.Close()
	g, gctx := errgroup.WithContext(ctx)
	safeGo(g, "checking that Kafka answers", func() error { return r.reach.CheckAtStart(gctx, r.sink.Ping) })
	// As in Run: the stages after the reader outlive it, which waits for
	// what it handed on before it returns.
	stopDownstream := r.downstream.run(gctx, g)
	defer stopDownstream()
	safeGo(g, "replaying", func() error {
		defer stopDownstream()
		err := r.source.Run(gctx)
		if err == nil && ctx.Err() == nil {
			// Done: the reach check and the rest end with it.
			return errReplayDone
		}
		return err
	})
	if err := g.Wait(); err != nil && !errors.Is(err, errReplayDone) {
		return fmt.Errorf("replaying: %w", err)
	}
	return nil
}

// errReplayDone ends a finished replay's group.
var errReplayDone = errors.New("replay done")

// Close releases the Kafka client and the in-flight budget of a Replay
// that is not run (Run does it when it returns).
func (r *Replay) Close() { r.close() }
