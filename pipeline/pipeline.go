package pipeline

import (
	"context"
	"log/slog"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/registry"
	"github.com/outboxd/outboxd/slot"
)

// Pipeline is one slot's way to Kafka: the stream, the pump, the sink, the
// WAL monitor and the heartbeat, run as one unit.
type Pipeline struct {
	cfg    Config
	log    *slog.Logger
	reach  *publish.Reachability
	sink   sink
	txn    *publish.TxnProducer // the sink, with exactly-once delivery; else nil
	pump   *pump.Pump
	stream *cdc.Streamer
	reg    *registry.Stage // nil without a schema format
	wal    *slot.Monitor
	hb     *slot.Heartbeat // nil without a heartbeat
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
	p := &Pipeline{cfg: cfg, log: log}
	// reach counts every Kafka client's failed dials and requests: a wrong
	// broker address is retried for ever, and must not look healthy
	// meanwhile.
	p.reach = publish.NewReachability(cfg.Kafka.Brokers, log)
	kafka := cfg.Kafka
	kafka.Opts = append(slices.Clone(kafka.Opts), p.reach.Hooks())
	stream := cfg.Stream
	var err error
	if cfg.Delivery == ExactlyOnce {
		// The progress key names the server the records come from, as
		// their own replication connection identified it.
		identify := func(ctx context.Context) (publish.Server, error) {
			sys, timeline, walEnd, err := p.stream.Server(ctx)
			return publish.Server{SystemID: sys, Timeline: timeline, WALEnd: walEnd}, err
		}
		if p.txn, err = publish.NewTxn(cfg.Txn, kafka, streamSlot(cfg.Stream), identify, log); err != nil {
			return nil, err
		}
		p.sink = p.txn
		// Progress recorded for one server is no resume point on another.
		stream.StopOnServerChange = true
	} else if p.sink, err = publish.New(kafka, log); err != nil {
		return nil, err
	}
	if cfg.Pump.DeadLetterTopic != "" {
		stream.TolerateUnusableTables = true // their rows go to the dead-letter topic
	}
	if p.pump, err = pump.New(cfg.Pump, p.sink, log); err != nil {
		p.sink.Close()
		return nil, err
	}
	if p.stream, err = cdc.New(stream, p.pump, log); err != nil {
		p.sink.Close()
		return nil, err
	}
	if cfg.Registry.Enabled() {
		if p.reg, err = registry.New(cfg.Registry, p.pump, log); err != nil {
			p.sink.Close()
			return nil, err
		}
		p.stream.Through(p.reg)
	}
	mon := cfg.monitor()
	mon.AcknowledgedCommit = p.pump.FlushedCommitTime
	if p.wal, err = slot.NewMonitor(mon, log); err != nil {
		p.sink.Close()
		return nil, err
	}
	if cfg.Heartbeat > 0 {
		// Only the replica streaming the slot writes heartbeats.
		active := func() bool { return p.stream.Stats().State == cdc.StateStreaming }
		if p.hb, err = slot.NewHeartbeat(slot.HeartbeatConfig{DatabaseURL: cfg.Stream.DatabaseURL, Interval: cfg.Heartbeat, Active: active}, log); err != nil {
			p.sink.Close()
			return nil, err
		}
	}
	return p, nil
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
	}()
	defer p.pump.Close()
	defer p.sink.Close()
	if t := p.cfg.Pump.DeadLetterTopic; t != "" {
		if err := checkDeadLetterTopic(ctx, p.sink, t, p.cfg.Kafka.AllowAutoTopicCreation, p.log); err != nil {
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
	// The registry's fetcher outlives the stream, which finishes its open
	// transaction at a stop and may need a schema for it.
	streamDone := func() {}
	if p.reg != nil {
		regCtx, stopReg := context.WithCancel(context.WithoutCancel(gctx))
		defer stopReg()
		streamDone = stopReg
		safeGo(g, "fetching schemas", func() error { return p.reg.Run(regCtx) })
	}
	// The stream's Run returns nil only once gctx ended: on a stop, or
	// when a sibling failed (then g.Wait returns that sibling's error).
	if p.txn == nil {
		safeGo(g, "streaming", func() error {
			defer streamDone()
			return p.stream.Run(gctx)
		})
		return g.Wait()
	}
	// The exactly-once sink commits the records the stream drains at a
	// stop, so it outlives the stream; it stops it when it fails (fenced,
	// a record refused): its records fail, and so does the pump.
	sinkCtx, stopSink := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSink()
	safeGo(g, "producing Kafka transactions", func() error { return p.txn.Run(sinkCtx) })
	safeGo(g, "streaming", func() error {
		defer stopSink()
		defer streamDone()
		return p.stream.Run(gctx)
	})
	return g.Wait()
}

// safeGo runs f in g with its panic returned as an error (package
// contain): a bug one pipeline hits stops that pipeline, as any failure
// does, and not the process with every other pipeline in it.
func safeGo(g *errgroup.Group, what string, f func() error) {
	g.Go(func() error { return contain.Call(what, f) })
}

// Close releases the Kafka client of a Pipeline that is not run.
func (p *Pipeline) Close() {
	p.sink.Close()
	p.pump.Close()
}

// Stream is the pipeline's replication stream: its state and statistics.
func (p *Pipeline) Stream() *cdc.Streamer { return p.stream }

// Monitor is the pipeline's WAL monitor: the WAL its slot retains.
func (p *Pipeline) Monitor() *slot.Monitor { return p.wal }

// Reach says whether Kafka answers the pipeline's clients.
func (p *Pipeline) Reach() *publish.Reachability { return p.reach }

// Observe sets the observer of the pipeline's records (metrics). Call it
// before Run.
func (p *Pipeline) Observe(o pump.Observer) { p.pump.Observe(o) }

// Ping checks that Kafka answers the pipeline's client.
func (p *Pipeline) Ping(ctx context.Context) error { return p.sink.Ping(ctx) }

// Counts are the pipeline's running totals that its stages keep.
type Counts struct {
	DataLoss   func() uint64 // records Kafka reported lost (data loss detected)
	Heartbeats func() uint64 // nil without a heartbeat
	// With exactly-once delivery, else nil: Kafka transactions committed
	// and records skipped as already committed.
	KafkaTransactions func() uint64
	SkippedRecords    func() uint64
}

// Counts returns the pipeline's running totals.
func (p *Pipeline) Counts() Counts {
	c := Counts{DataLoss: p.sink.DataLossEvents}
	if p.hb != nil {
		c.Heartbeats = p.hb.Written
	}
	if txn := p.txn; txn != nil {
		c.KafkaTransactions = func() uint64 { return txn.Stats().Committed }
		c.SkippedRecords = func() uint64 { return txn.Stats().Skipped }
	}
	return c
}
