package pipeline

import (
	"context"
	"log/slog"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/registry"
)

// downstream is what a reader (the stream, or a replay) hands its changes
// to: [registry] → pump → sink, and the reachability every Kafka client
// of the sink reports to. A Pipeline and a Replay build it alike.
type downstream struct {
	reach *publish.Reachability
	sink  sink
	txn   *publish.TxnProducer // the sink, with exactly-once delivery; else nil
	pump  *pump.Pump
	reg   *registry.Stage // nil without a schema format
}

// buildDownstream builds cfg's sink, pump and schema stage. With
// exactly-once delivery the sink is a publish.TxnProducer for slot with
// txn's settings and identify; else a publish.Producer. On an error,
// what was built is closed.
func buildDownstream(cfg Config, txn publish.TxnConfig, slot string, identify func(context.Context) (publish.Server, error), log *slog.Logger) (*downstream, error) {
	d := &downstream{}
	// reach counts every Kafka client's failed dials and requests: a wrong
	// broker address is retried for ever, and must not look healthy
	// meanwhile.
	d.reach = publish.NewReachability(cfg.Kafka.Brokers, cfg.Kafka.Names, log)
	kafka := cfg.Kafka
	kafka.Opts = append(slices.Clone(kafka.Opts), d.reach.Hooks())
	var err error
	if cfg.Delivery == ExactlyOnce {
		if d.txn, err = publish.NewTxn(txn, kafka, slot, identify, log); err != nil {
			return nil, err
		}
		d.sink = d.txn
	} else if d.sink, err = publish.New(kafka, log); err != nil {
		return nil, err
	}
	if d.pump, err = pump.New(cfg.Pump, d.sink, log); err != nil {
		d.sink.Close()
		return nil, err
	}
	if cfg.Observer != nil {
		d.pump.Observe(cfg.Observer)
	}
	if cfg.Registry.Enabled() {
		if d.reg, err = registry.New(cfg.Registry, d.pump, log); err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

// first is the stage a reader hands its changes to.
func (d *downstream) first() outbox.Stage {
	if d.reg != nil {
		return d.reg
	}
	return d.pump
}

// close releases the Kafka client and the pump's in-flight budget.
func (d *downstream) close() {
	d.sink.Close()
	d.pump.Close()
}

// run runs the stages after the reader (the schema stage when there is
// one, the pump, the exactly-once sink when there is one) in g, on a
// context of their own that outlives gctx's cancel: the reader drains
// through them at a stop. stop ends them; call it once the reader
// returned.
func (d *downstream) run(gctx context.Context, g *errgroup.Group) (stop func()) {
	ctx, stop := context.WithCancel(context.WithoutCancel(gctx))
	if d.reg != nil {
		safeGo(g, "fetching schemas", func() error { return d.reg.Run(ctx) })
	}
	safeGo(g, "running the pump", func() error { return d.pump.Run(ctx) })
	if d.txn != nil {
		safeGo(g, "producing Kafka transactions", func() error { return d.txn.Run(ctx) })
	}
	return stop
}
