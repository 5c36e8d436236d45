package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// killCoordinator kills -9 the broker coordinating a random exactly-once
// pipeline's transactional id, waits for every pipeline to go on without
// it, then starts it again.
func (in *fleetInjector) killCoordinator(ctx context.Context) error {
	var eos []*fleetPipeline
	for _, p := range in.bed.pipelines {
		if p.exactlyOnce {
			eos = append(eos, p)
		}
	}
	if len(eos) == 0 || in.bed.kafka == nil || in.bed.kafka.cluster == nil {
		return errors.New("no exactly-once pipeline, or no three-broker cluster")
	}
	p := eos[in.rng.IntN(len(eos))]
	coords, err := txnCoordinators(ctx, in.bed.brokers, eos)
	if err != nil {
		return err
	}
	id := coords[p.txnID]
	var coordinated []string
	for _, q := range eos {
		if coords[q.txnID] == id {
			coordinated = append(coordinated, q.name)
		}
	}
	node := in.bed.kafka.cluster.Node(id)
	at := time.Now()
	in.mark(FaultCoordinatorKill, at, in.active()...)
	if err := node.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	in.log.Info("transaction coordinator killed", "node", id, "of", p.name, "coordinates", coordinated)
	// Recovered once another broker coordinates the transactional id and
	// every pipeline published what was written after that.
	var moved int32
	deadline := time.Now().Add(recoveryTimeout)
	for moved == 0 || moved == id {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's transactional id still coordinated by the dead node %d after %s", p.name, id, recoveryTimeout)
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
		if coords, err := txnCoordinators(ctx, in.bed.brokers, []*fleetPipeline{p}); err == nil {
			moved = coords[p.txnID]
		}
	}
	if _, err := in.settle(ctx, fmt.Sprintf("coordinator_kill9 of node %d: without it", id), true); err != nil {
		return err
	}
	recovered := ms(time.Since(at))
	in.sleepBetween(ctx, time.Second, 3*time.Second)
	if err := node.Start(ctx); err != nil {
		return err
	}
	if _, err := in.settle(ctx, fmt.Sprintf("coordinator_kill9 of node %d: back", id), true); err != nil {
		return err
	}
	in.note(FleetFault{Fault: FaultCoordinatorKill, Seconds: in.seconds(at), Node: id, Pipelines: in.active(), RecoveredMS: recovered,
		Note: fmt.Sprintf("node %d coordinated %s (%s's transactional id); node %d took over %s's", id, strings.Join(coordinated, ", "), p.name, moved, p.name)})
	return nil
}

// txnCoordinators finds the broker coordinating each pipeline's
// transactional id.
func txnCoordinators(ctx context.Context, brokers []string, ps []*fleetPipeline) (map[string]int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ids := make([]string, 0, len(ps))
	for _, p := range ps {
		ids = append(ids, p.txnID)
	}
	resp := kadm.NewClient(cl).FindTxnCoordinators(ctx, ids...)
	if err := resp.Error(); err != nil {
		return nil, fmt.Errorf("finding the transaction coordinators: %w", err)
	}
	out := map[string]int32{}
	for id, r := range resp {
		out[id] = r.NodeID
	}
	return out, nil
}
