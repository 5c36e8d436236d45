package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// RunFleet executes one fleet run and checks it: o.Pipelines pipelines,
// each its own database (migrated) and topic, every other one
// exactly-once, run by o.Replicas replicas of `outboxd run --config FILE`,
// while writers commit to every pipeline at a steady rate and the faults
// are injected one after another (each recovered from before the next).
// Each pipeline is then checked on its own (see verdict), its exactly-once
// topic read back with read_committed.
func RunFleet(ctx context.Context, o FleetOptions) (rep FleetReport, err error) {
	start := time.Now()
	o = o.withDefaults()
	if err := o.check(); err != nil {
		return rep, err
	}
	log := o.Log
	rng := rand.New(rand.NewPCG(o.Seed, 39))
	rep = FleetReport{Pipelines: o.Pipelines, Replicas: o.Replicas, KafkaNodes: o.KafkaNodes, RatePerPipeline: o.Rate, FaultsInjected: map[Fault]int{}}
	if len(o.Brokers) > 0 {
		rep.KafkaNodes = len(o.Brokers)
	}
	bed, err := setUpBed(ctx, o, rng)
	if err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, bed.remove(context.WithoutCancel(ctx))) }()
	if err := queryRow(ctx, bed.adminURL, `SELECT current_setting('server_version_num')::int`, nil, &rep.PostgresVersion); err != nil {
		return rep, err
	}
	log.Info("fleet set up", "pipelines", o.Pipelines, "replicas", o.Replicas, "file", bed.file, "postgres", bed.adminURL, "kafka", bed.brokers)

	reps, err := newReplicaSet(o.Outboxd, bed.file, o.Replicas, o.RankDelay, o.PublisherLog)
	if err != nil {
		return rep, err
	}
	defer reps.stopAll()
	for i := range o.Replicas {
		if err := reps.start(i); err != nil {
			return rep, err
		}
	}
	in := &fleetInjector{o: o, bed: bed, reps: reps, rng: rng, start: start, log: log, rep: &rep}

	// The writers, and each pipeline's peak rate (for the kill's bound).
	stop := make(chan struct{})
	g, gctx := errgroup.WithContext(ctx)
	peaks := make([]int, len(bed.pipelines))
	var peakMu sync.Mutex
	g.Go(func() error {
		last := make([]int64, len(bed.pipelines))
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-stop:
				return nil
			case <-t.C:
			}
			peakMu.Lock()
			for i, p := range bed.pipelines {
				now := p.ledger.events.Load()
				peaks[i] = max(peaks[i], int(now-last[i]))
				last[i] = now
			}
			peakMu.Unlock()
		}
	})
	for i, p := range bed.pipelines {
		for w := range o.Writers {
			g.Go(func() error {
				wr := newWriter(w, p.url, p.topic, 10, p.ledger, 1<<60, o.Seed+uint64(i), log)
				wr.rate = float64(o.Rate) / float64(o.Writers)
				wr.stop, wr.hold = stop, &p.hold
				return wr.run(gctx)
			})
		}
	}

	faults := scheduleOf(FleetFaults(), o.Faults, o.Seed)
	faultErr := func() error {
		if _, err := in.settle(gctx, "start", true); err != nil {
			return fmt.Errorf("starting: %w", err)
		}
		for k, f := range faults {
			if !sleep(gctx, o.Pause) {
				return gctx.Err()
			}
			log.Info("injecting fault", "fault", f, "n", k+1, "of", len(faults))
			if err := in.inject(gctx, f); err != nil {
				return fmt.Errorf("injecting %s: %w", f, err)
			}
		}
		sleep(gctx, o.Pause)
		return nil
	}()
	if faultErr != nil {
		rep.Problems = append(rep.Problems, faultErr.Error())
	}
	close(stop)
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return rep, err
	}
	log.Info("writes done")
	rep.Problems = append(rep.Problems, reps.exitedOnTheirOwn()...)
	rep.Problems = append(rep.Problems, reps.overlaps...)
	if err := in.confirmed(ctx, map[string]int64{}); err != nil {
		rep.Problems = append(rep.Problems, "after the writes: "+err.Error())
	}
	// Every replica stops gracefully, at once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, p := range reps.procs {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, err := reps.procs[i].terminate(time.Minute)
			if err != nil || code != 0 {
				mu.Lock()
				rep.Problems = append(rep.Problems, fmt.Sprintf("final SIGTERM of replica %d: exit code %d, %v; log tail:\n%s", i, code, err, p.tail()))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i := range reps.procs {
		reps.procs[i] = nil
	}

	startSec := float64(start.UnixMicro()) / 1e6
	for i, p := range bed.pipelines {
		delivered, err := readAll(ctx, bed.brokers, p.topic, p.exactlyOnce)
		if err != nil {
			return rep, fmt.Errorf("reading %s back: %w", p.name, err)
		}
		pr, poison := verdict(pipelineOutcome{name: p.name, exactlyOnce: p.exactlyOnce, committed: p.ledger.committed, rolledBack: p.ledger.rolledBack,
			delivered: delivered, marks: p.marks, start: startSec, poisonID: p.poisonID, boundary: p.boundary, maxInFlight: o.MaxInFlight, per100ms: peaks[i]})
		rep.Pipeline = append(rep.Pipeline, pr)
		rep.Problems = append(rep.Problems, pr.Problems...)
		rep.Committed += pr.Committed
		rep.Published += pr.Published
		rep.Lost += pr.Lost
		rep.Leaked += pr.Leaked
		rep.OrderViolations += pr.OrderViolations
		rep.Duplicates += pr.Duplicates
		if poison != nil && rep.Poison != nil {
			poison.PayloadBytes, poison.MaxRecordBytes = rep.Poison.PayloadBytes, rep.Poison.MaxRecordBytes
			poison.BackingOffAfterMS, poison.BackingOffDetail = rep.Poison.BackingOffAfterMS, rep.Poison.BackingOffDetail
			rep.Poison = poison
		}
	}
	if rep.Poison != nil {
		rep.Poison.OthersCommittedAfter = othersCommittedAfter(bed, rep.Poison.Pipeline, in.othersBefore)
	}
	if len(rep.TakeoverMS) > 0 {
		s := slices.Clone(rep.TakeoverMS)
		slices.Sort(s)
		rep.TakeoverMedianMS, rep.TakeoverMaxMS = s[len(s)/2], s[len(s)-1]
	}
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

// othersCommittedAfter counts the events the other pipelines committed
// after the poison row (their verdicts found each published).
func othersCommittedAfter(bed *fleetBed, poisoned string, before map[string]int) int {
	n := 0
	for _, p := range bed.pipelines {
		if p.name != poisoned {
			n += len(p.ledger.committed) - before[p.name]
		}
	}
	return n
}
