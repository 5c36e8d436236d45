package chaos

import (
	"fmt"
	"io"
	"log/slog"
	"time"
)

// The faults of a fleet run (RunFleet) besides kill9 (a replica killed,
// started again after FleetOptions.Down), sigterm_restart (a replica
// stopped gracefully, started again after Down) and walsender_terminate
// (one pipeline's walsender).
const (
	// One pipeline's database refuses every connection for a while
	// (ALTER DATABASE ... ALLOW_CONNECTIONS false, its backends
	// terminated), then takes them again.
	FaultDatabaseUnreachable Fault = "database_unreachable"
	// A row larger than its at-least-once pipeline's --max-record-bytes,
	// which has no dead-letter topic: that pipeline stops at it and backs
	// off for good, publishing nothing committed after it; the others go
	// on.
	FaultPoisonRow Fault = "poison_row"
	// kill -9 of the broker that coordinates an exactly-once pipeline's
	// transactional id (three brokers only), started again after a while.
	FaultCoordinatorKill Fault = "coordinator_kill9"
	// Not injected: a replica that came back after a kill -9 or a
	// SIGTERM taking back the pipelines it is ranked first for, each
	// through a graceful hand-over. Duplicates after it count under it
	// (bound 0).
	FaultHandover Fault = "handover"
)

// FleetFaults lists the faults RunFleet injects, in the order reports
// list them.
func FleetFaults() []Fault {
	return []Fault{FaultKill9, FaultSIGTERM, FaultWalsender, FaultDatabaseUnreachable, FaultPoisonRow, FaultCoordinatorKill}
}

// FleetOptions configures a fleet run: many pipelines over several
// replicas of `outboxd run --config FILE`.
type FleetOptions struct {
	Outboxd string // path of the outboxd binary
	Script  string // harness/testbed/testbed.sh: starts the servers not given
	// AdminURL, when set, is a superuser URL of a PostgreSQL to use
	// instead of a private one, and Brokers a Kafka to use instead of a
	// private one: the run's databases and topics are dropped at its end.
	AdminURL string
	Brokers  []string
	// KafkaNodes is the private Kafka's size (without Brokers): 1, or 3
	// (replication factor 3, min.insync.replicas 2; coordinator_kill9
	// needs it).
	KafkaNodes int
	Pipelines  int           // each its own database, slot and topic; every other one exactly-once (default 20)
	Replicas   int           // processes running the same pipelines file (default 3)
	Rate       int           // events a second written to each pipeline (default 50)
	Writers    int           // concurrent writers per pipeline (default 2)
	Faults     map[Fault]int // how many of each of FleetFaults to inject, in a random order
	Pause      time.Duration // steady writing before each fault and after the last (default 5s)
	Down       time.Duration // how long a killed or stopped replica stays down (default 5s)
	// SlotRetryInterval and RankDelay are the replicas' own (defaults 1s
	// and 2s: 20 pipelines over 3 replicas have 40 standbys checking their
	// slot).
	SlotRetryInterval, RankDelay time.Duration
	MaxInFlight                  int    // --max-in-flight-records (default 1000): bounds a kill's duplicates
	Seed                         uint64 // for the writers, the fault order and the pipelines the faults hit
	Log                          *slog.Logger
	PublisherLog                 io.Writer // the replicas' logs, prefixed; nil: dropped
}

// poisonMaxRecordBytes is the poisoned pipeline's --max-record-bytes; the
// poison row's payload is twice as large.
const poisonMaxRecordBytes = 16 << 10

func (o FleetOptions) withDefaults() FleetOptions {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.KafkaNodes, 1)
	def(&o.Pipelines, 20)
	def(&o.Replicas, 3)
	def(&o.Rate, 50)
	def(&o.Writers, 2)
	def(&o.MaxInFlight, 1000)
	defDur(&o.Pause, 5*time.Second)
	defDur(&o.Down, 5*time.Second)
	defDur(&o.SlotRetryInterval, time.Second)
	defDur(&o.RankDelay, 2*time.Second)
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// check refuses what the run cannot do.
func (o FleetOptions) check() error {
	fleetFault := map[Fault]bool{}
	for _, f := range FleetFaults() {
		fleetFault[f] = true
	}
	for f, n := range o.Faults {
		if n > 0 && !fleetFault[f] {
			return fmt.Errorf("fault %s is not one of a fleet run's (%v)", f, FleetFaults())
		}
	}
	switch {
	case o.Pipelines < 2:
		return fmt.Errorf("%d pipelines: a fleet run needs at least 2 (one at-least-once, one exactly-once)", o.Pipelines)
	case o.Replicas < 2 && o.Faults[FaultKill9]+o.Faults[FaultSIGTERM] > 0:
		return fmt.Errorf("%d replica: killing or stopping one needs another to take over", o.Replicas)
	case o.Faults[FaultPoisonRow] > 1:
		return fmt.Errorf("%d poison rows: a poisoned pipeline stops for good, so a run poisons one", o.Faults[FaultPoisonRow])
	case o.Faults[FaultCoordinatorKill] > 0 && (len(o.Brokers) > 0 || o.KafkaNodes < 3):
		return fmt.Errorf("fault %s needs the run's own three-broker cluster (KafkaNodes 3, no Brokers)", FaultCoordinatorKill)
	case o.RankDelay <= o.SlotRetryInterval:
		return fmt.Errorf("rank delay %s must exceed the slot retry interval %s (docs/fleet.md)", o.RankDelay, o.SlotRetryInterval)
	case (o.AdminURL == "") != (len(o.Brokers) == 0):
		return fmt.Errorf("give both a PostgreSQL (AdminURL) and a Kafka (Brokers) of your own, or neither")
	}
	return nil
}
