package pipeline

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/slot"
)

// Pipeline is one slot's way to Kafka, its stages built and run as one
// unit: stream → [registry] → pump → sink, with the WAL monitor and the
// heartbeat beside them.
type Pipeline struct {
	cfg Config
	log *slog.Logger
	*downstream
	stream *cdc.Streamer
	wal    *slot.Monitor
	hb     *slot.Heartbeat // nil without a heartbeat
	// failed counts the runs that ended in an error (one at most).
	failed atomic.Uint64
	// pausedSince is when Run of a paused pipeline began (Config.Paused).
	pausedSince atomic.Pointer[time.Time]
}

// sink is what a Pipeline needs of either producer.
type sink interface {
	pump.Sink
	topicAdmin
	Ping(ctx context.Context) error
	DataLossEvents() uint64
	Close()
}

// New builds a Pipeline from cfg, refusing a Config that does not
// validate. It does no I/O: nothing connects before Run. Run it, or Close
// it.
func New(cfg Config, log *slog.Logger) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg.named(), log: log}
	if err := p.build(); err != nil {
		if p.downstream != nil {
			p.close()
		}
		return nil, err
	}
	return p, nil
}

// build makes the stages, from the sink up to the stream.
func (p *Pipeline) build() error {
	cfg := p.cfg
	stream := cfg.Stream
	// The progress key names the server the records come from, as their
	// own replication connection identified it.
	identify := func(ctx context.Context) (publish.Server, error) {
		sys, timeline, walEnd, err := p.stream.Server(ctx)
		return publish.Server{SystemID: sys, Timeline: timeline, WALEnd: walEnd}, err
	}
	var err error
	if p.downstream, err = buildDownstream(cfg, cfg.Txn, streamSlot(cfg.Stream), identify, p.log); err != nil {
		return err
	}
	if cfg.Delivery == ExactlyOnce {
		// Progress recorded for one server is no resume point on another.
		stream.StopOnServerChange = true
	}
	if cfg.Pump.DeadLetterTopic != "" {
		stream.TolerateUnusableTables = true // their rows go to the dead-letter topic
	}
	first := p.first()
	if p.stream, err = cdc.New(stream, first, p.pump, p.log); err != nil {
		return err
	}
	mon := cfg.monitor()
	mon.AcknowledgedCommit = p.pump.FlushedCommitTime
	if p.wal, err = slot.NewMonitor(mon, p.log); err != nil {
		return err
	}
	if cfg.Heartbeat > 0 {
		// Only the replica streaming the slot writes heartbeats.
		active := func() bool { return p.stream.Stats().State == cdc.StateStreaming }
		if p.hb, err = slot.NewHeartbeat(slot.HeartbeatConfig{DatabaseURL: cfg.Stream.DatabaseURL, PrimaryURL: cfg.Stream.PrimaryURL, Interval: cfg.Heartbeat, Active: active}, p.log); err != nil {
			return err
		}
	}
	return nil
}

// streamSlot is the slot the stream reads.
func streamSlot(c cdc.Config) string { return c.WithDefaults().Slot }

// Run runs the pipeline until ctx ends (a graceful stop: it returns nil
// once the stream finished its open transaction, Kafka acknowledged and
// the slot is confirmed) or a stage fails for good (its error). It closes
// the Kafka client before it returns. Call it once.
//
// A panic in any of its goroutines stops it with a *contain.PanicError,
// as any failure does: one pipeline's bug never stops the process.
func (p *Pipeline) Run(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = contain.Recovered("running the pipeline", v)
		}
		if err != nil {
			p.failed.Add(1)
		}
	}()
	defer p.Close()
	if p.cfg.Paused {
		return p.runPaused(ctx)
	}
	if t := p.cfg.Pump.DeadLetterTopic; t != "" {
		if err := checkDeadLetterTopic(ctx, p.sink, t, p.cfg.Kafka.AllowAutoTopicCreation, p.cfg.Names, p.log); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	// Kafka is checked beside the stream, not before it: while it does
	// not answer, the stream goes on and its records wait.
	safeGo(g, "checking that Kafka answers", func() error { return p.reach.CheckAtStart(gctx, p.sink.Ping) })
	safeGo(g, "checking the WAL the slot retains", func() error { return p.wal.Run(gctx) })
	if p.hb != nil {
		safeGo(g, "writing heartbeats", func() error { return p.hb.Run(gctx) })
	}
	// The stages downstream of the stream outlive it: at a stop it
	// finishes its open transaction and drains, which may need a schema,
	// the pump's dead letters and, with exactly-once delivery, the
	// sink's commits. They stop once it returned; any of them failing
	// ends gctx, which stops the stream (its records fail, and the
	// failure is Run's error).
	stopDownstream := p.downstream.run(gctx, g)
	defer stopDownstream()
	// The stream's Run returns nil only once gctx ended: on a stop, or
	// when a sibling failed (then g.Wait returns that sibling's error).
	safeGo(g, "streaming", func() error {
		defer stopDownstream()
		return p.stream.Run(gctx)
	})
	return g.Wait()
}

// runPaused stands paused until ctx ends: nothing is read from the slot,
// which keeps its confirmed position (its WAL grows meanwhile, so the
// monitor keeps reporting it, and stops the pipeline if PostgreSQL
// invalidates the slot).
func (p *Pipeline) runPaused(ctx context.Context) error {
	now := time.Now()
	p.pausedSince.Store(&now)
	p.log.Info("pipeline paused: reading nothing from the slot, which stays at its confirmed position and retains WAL until the pipeline resumes",
		"slot", streamSlot(p.cfg.Stream))
	return contain.Call("checking the WAL the slot retains", func() error { return p.wal.Run(ctx) })
}

// safeGo runs f in g with its panic returned as an error (package
// contain): a bug one pipeline hits stops that pipeline, as any failure
// does, and not the process with every other pipeline in it.
func safeGo(g *errgroup.Group, what string, f func() error) {
	g.Go(func() error { return contain.Call(what, f) })
}

// Close releases the Kafka client and the in-flight budget of a Pipeline
// that is not run (Run does it when it returns).
func (p *Pipeline) Close() { p.close() }

// TakeNow makes the pipeline's stream, standing by, try its slot at once,
// without its takeover delay: the replica that held it let it go for
// this one (cdc.Streamer.TakeNow).
func (p *Pipeline) TakeNow() { p.stream.TakeNow() }

// Ping checks that Kafka answers the pipeline's client.
func (p *Pipeline) Ping(ctx context.Context) error { return p.sink.Ping(ctx) }
