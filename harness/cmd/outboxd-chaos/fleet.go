package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/outboxd/outboxd/harness/chaos"
)

// fleetOnly lists the faults of a fleet run alone.
func fleetOnly() []chaos.Fault {
	return []chaos.Fault{chaos.FaultDatabaseUnreachable, chaos.FaultPoisonRow, chaos.FaultCoordinatorKill}
}

// fleetDefaults are a fleet run's fault counts when their flags are not
// given; coordinator_kill9 needs -kafka-nodes 3 and defaults to none
// without it.
func fleetDefaults() map[chaos.Fault]int {
	return map[chaos.Fault]int{chaos.FaultKill9: 3, chaos.FaultSIGTERM: 2, chaos.FaultWalsender: 3,
		chaos.FaultDatabaseUnreachable: 1, chaos.FaultPoisonRow: 1, chaos.FaultCoordinatorKill: 1}
}

// fleetOpts are the flags of -fleet alone.
type fleetOpts struct {
	on                           *bool
	pipelines, replicas, rate    *int
	pause, down                  *time.Duration
	slotRetryInterval, rankDelay *time.Duration
}

func fleetFlags(fs *flag.FlagSet) fleetOpts {
	return fleetOpts{
		on: fs.Bool("fleet", false, "run many pipelines over several replicas of outboxd run --config FILE (-pipelines, -replicas) with faults of "+
			faultNames(chaos.FleetFaults())+", each pipeline checked on its own; fault counts default to "+fmt.Sprint(fleetDefaults())+
			" (-kafka-nodes 3 for coordinator_kill9); -events, -writers, -aggregates and -exactly-once do not apply"),
		pipelines:         fs.Int("pipelines", 20, "with -fleet: pipelines, each its own database and topic, every other one exactly-once"),
		replicas:          fs.Int("replicas", 3, "with -fleet: replicas running the pipelines file"),
		rate:              fs.Int("pipeline-rate", 50, "with -fleet: events a second written to each pipeline"),
		pause:             fs.Duration("pause", 5*time.Second, "with -fleet: steady writing before each fault and after the last"),
		down:              fs.Duration("down", 5*time.Second, "with -fleet: how long a killed or stopped replica, or an unreachable database, stays down"),
		slotRetryInterval: fs.Duration("slot-retry-interval", time.Second, "with -fleet: the replicas' --slot-retry-interval"),
		rankDelay:         fs.Duration("rank-delay", 2*time.Second, "with -fleet: the replicas' --rank-delay"),
	}
}

// runFleet is -fleet: the fault counts given (or fleetDefaults), written
// and checked as RunFleet does.
func runFleet(fo fleetOpts, o chaos.Options, counts map[chaos.Fault]*int, set map[string]bool, jsonOut string, verbose bool, stdout, stderr io.Writer) int {
	faults := map[chaos.Fault]int{}
	for f, n := range counts {
		switch {
		case slices.Contains(chaos.FleetFaults(), f) && set[string(f)]:
			faults[f] = *n
		case slices.Contains(chaos.FleetFaults(), f):
			faults[f] = fleetDefaults()[f]
			if f == chaos.FaultCoordinatorKill && o.KafkaNodes < 3 {
				faults[f] = 0
			}
		case set[string(f)] && *n > 0:
			fmt.Fprintf(stderr, "outboxd-chaos: -%s is not a fleet run's fault (%s)\n", f, faultNames(chaos.FleetFaults()))
			return 2
		}
	}
	for _, name := range []string{"events", "writers", "aggregates", "exactly-once"} {
		if set[name] {
			fmt.Fprintf(stderr, "outboxd-chaos: -%s does not apply to -fleet (every other pipeline is exactly-once; -pipeline-rate sets the writes)\n", name)
			return 2
		}
	}
	fl := chaos.FleetOptions{Outboxd: o.Outboxd, Script: o.Script, KafkaNodes: o.KafkaNodes, Pipelines: *fo.pipelines, Replicas: *fo.replicas,
		Rate: *fo.rate, Faults: faults, Pause: *fo.pause, Down: *fo.down, SlotRetryInterval: *fo.slotRetryInterval, RankDelay: *fo.rankDelay,
		MaxInFlight: o.MaxInFlight, Seed: o.Seed, Log: slog.New(slog.NewTextHandler(stderr, nil))}
	if !set["max-in-flight-records"] {
		fl.MaxInFlight = 0 // the fleet run's own default
	}
	if verbose {
		fl.PublisherLog = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.RunFleet(ctx, fl)
	if err != nil {
		fmt.Fprintln(stderr, "outboxd-chaos:", err)
		return 1
	}
	return report(stdout, stderr, rep, func(w io.Writer) { printFleetTable(w, rep) }, jsonOut, rep.OK(),
		"a pipeline's verdict failed, or a replica misbehaved")
}

func printFleetTable(w io.Writer, r chaos.FleetReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "pipelines\t%d over %d replicas, %d events/s each, Kafka %d broker(s), PostgreSQL %d\n", r.Pipelines, r.Replicas, r.RatePerPipeline, r.KafkaNodes, r.PostgresVersion)
	fmt.Fprintf(tw, "committed\t%d\n", r.Committed)
	fmt.Fprintf(tw, "published records\t%d\n", r.Published)
	fmt.Fprintf(tw, "lost, leaked, reordered\t%d, %d, %d\n", r.Lost, r.Leaked, r.OrderViolations)
	fmt.Fprintf(tw, "duplicates\t%d\n", r.Duplicates)
	for _, f := range r.Faults {
		fmt.Fprintf(tw, "fault at %.1f s\t%s", f.Seconds, f.Fault)
		if f.Replica != nil {
			fmt.Fprintf(tw, " of replica %d", *f.Replica)
		}
		if f.Node != 0 {
			fmt.Fprintf(tw, " of node %d", f.Node)
		}
		fmt.Fprintf(tw, ", pipelines %v", f.Pipelines)
		if f.RecoveredMS > 0 {
			fmt.Fprintf(tw, ", recovered in %.0f ms", f.RecoveredMS)
		}
		if f.Note != "" {
			fmt.Fprintf(tw, " (%s)", f.Note)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "takeover after kill -9\tmedian %.0f ms, max %.0f ms over %d\n", r.TakeoverMedianMS, r.TakeoverMaxMS, len(r.TakeoverMS))
	for _, s := range r.Spread {
		fmt.Fprintf(tw, "spread at %.1f s\t%v streaming per replica (-1: down), %d on their preferred replica, after %s\n", s.Seconds, s.Streaming, s.OnPreferred, s.After)
	}
	if p := r.Poison; p != nil {
		fmt.Fprintf(tw, "poison row\t%s, outbox id %d (%d bytes over --max-record-bytes %d): %d events committed before it, %d after (%d of them published); the others committed %d after it; backing off %.0f ms after it: %s\n",
			p.Pipeline, p.ID, p.PayloadBytes, p.MaxRecordBytes, p.CommittedBefore, p.CommittedAfter, p.PublishedAfter, p.OthersCommittedAfter, p.BackingOffAfterMS, p.BackingOffDetail)
	}
	for _, p := range r.Pipeline {
		fmt.Fprintf(tw, "pipeline %s\t%s: committed %d, published %d, duplicates %d by fault %v (bounds %v)\n", p.Name, p.Delivery, p.Committed, p.Published, p.Duplicates, p.DuplicatesByFault, p.DuplicateBoundByFault)
	}
	fmt.Fprintf(tw, "total time\t%.1f s\n", r.TotalSeconds)
	for _, p := range r.Problems {
		fmt.Fprintf(tw, "problem\t%s\n", p)
	}
	tw.Flush()
}
