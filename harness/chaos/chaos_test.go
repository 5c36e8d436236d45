package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/harness/testenv"
)

var outboxdBinary string

func TestMain(m *testing.M) {
	binary, remove, err := testbed.BuildOutboxd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	outboxdBinary = binary
	code := m.Run()
	remove()
	os.Exit(code)
}

func runChaos(t *testing.T, events int, faults map[Fault]int, exactlyOnce bool) Report {
	t.Helper()
	return runChaosOn(t, 1, events, faults, exactlyOnce)
}

func runChaosOn(t *testing.T, kafkaNodes, events int, faults map[Fault]int, exactlyOnce bool) Report {
	t.Helper()
	return runChaosWith(t, Options{Events: events, Faults: faults, ExactlyOnce: exactlyOnce, KafkaNodes: kafkaNodes})
}

func runChaosWith(t *testing.T, o Options) Report {
	t.Helper()
	o.Outboxd, o.Script, o.Writers, o.Aggregates, o.Seed = outboxdBinary, testenv.Script(t), 4, 20, 7
	events, faults := o.Events, o.Faults
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("measured: chaos %s on PostgreSQL %d, %d events, faults %v: lost %d, leaked %d, order violations %d, duplicates %d (bound %d) by fault %v (bounds %v), takeovers %v ms, failovers %v ms (backfilled rows %v), %.0f s",
		rep.Delivery, rep.PostgresVersion, rep.Committed, rep.FaultsInjected, rep.Lost, rep.Leaked, rep.OrderViolations, rep.Duplicates, rep.DuplicateBound,
		rep.DuplicatesByFault, rep.DuplicateBoundByFault, rep.TakeoverMS, rep.FailoverMS, rep.FailoverBackfillRows, rep.TotalSeconds)
	if len(rep.DetectMS)+len(rep.RecoverMS) > 0 {
		t.Logf("measured: detected after %v ms, recovered %v ms after the fault's end", rep.DetectMS, rep.RecoverMS)
	}
	if !rep.OK() {
		t.Errorf("chaos run failed:\n%s", strings.Join(append(rep.Examples, rep.Problems...), "\n"))
	}
	for f, n := range faults {
		if rep.FaultsInjected[f] != n {
			t.Errorf("injected %d %s faults, want %d", rep.FaultsInjected[f], f, n)
		}
	}
	if rep.Committed < events {
		t.Errorf("committed %d events, want at least %d", rep.Committed, events)
	}
	return rep
}

// TestChaosShort is the short chaos run of make test: a few faults of each
// kind while writing; nothing may be lost, leaked or reordered, and the
// duplicates of each fault kind stay within its bound (a problem in the
// report otherwise).
func TestChaosShort(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	rep := runChaos(t, 30000, map[Fault]int{FaultKill9: 3, FaultSIGTERM: 2, FaultBroker: 1, FaultPostgres: 1, FaultWalsender: 2, FaultTakeover: 2, FaultFailover: 1}, false)
	if rep.Duplicates > rep.DuplicateBound {
		t.Errorf("%d duplicates, more than the in-flight bound %d", rep.Duplicates, rep.DuplicateBound)
	}
	if len(rep.TakeoverMS) != 2 {
		t.Errorf("timed %d takeovers, want 2", len(rep.TakeoverMS))
	}
	// Before 17 the failover is recovered with a backfill; from 17 the
	// publisher goes on from the failover slot, with none.
	if len(rep.FailoverMS) != 1 || (rep.FailoverBackfillRows[0] > 0) != (rep.PostgresVersion < 170000) {
		t.Errorf("failovers %v ms with backfills of %v rows on PostgreSQL %d, want one, with a backfill before 17 and none from 17",
			rep.FailoverMS, rep.FailoverBackfillRows, rep.PostgresVersion)
	}
}

// TestChaosOnAStandbyShort is the short run of issue 52: outboxd decoding
// on a synchronous physical standby (PostgreSQL 16+) through kill -9,
// crashes of the standby and of the primary, and the standby's promotion.
func TestChaosOnAStandbyShort(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	if v := testenv.PGVersion(t); v != 0 && v < 16 {
		t.Skipf("decoding on a standby needs PostgreSQL 16 or later; the test bed runs %d", v)
	}
	for _, exactlyOnce := range []bool{false, true} {
		rep := runChaosWith(t, Options{Events: 20000, DecodeOnStandby: true, ExactlyOnce: exactlyOnce,
			Faults: map[Fault]int{FaultKill9: 1, FaultSIGTERM: 1, FaultPostgresCrash: 1, FaultStandbyCrash: 2, FaultStandbyPromote: 1}})
		if rep.DecodedOn != "standby" {
			t.Errorf("decoded on %q, want standby", rep.DecodedOn)
		}
		if exactlyOnce && rep.Duplicates != 0 {
			t.Errorf("%d duplicates in exactly-once mode, want 0", rep.Duplicates)
		}
	}
}

// TestChaosSIGTERMRestartsAddNoDuplicates: graceful restarts alone publish
// every event exactly once.
func TestChaosSIGTERMRestartsAddNoDuplicates(t *testing.T) {
	t.Parallel()
	rep := runChaos(t, 10000, map[Fault]int{FaultSIGTERM: 4}, false)
	if rep.Duplicates != 0 {
		t.Errorf("%d duplicates after SIGTERM restarts only, want 0", rep.Duplicates)
	}
}

// TestChaosExactlyOnceShort is the short chaos run in exactly-once mode:
// every fault kind while writing, read back with read_committed: nothing
// lost, leaked or reordered, and no duplicate at all.
func TestChaosExactlyOnceShort(t *testing.T) {
	t.Parallel()
	rep := runChaos(t, 30000, map[Fault]int{FaultKill9: 3, FaultSIGTERM: 2, FaultBroker: 1, FaultPostgres: 1, FaultWalsender: 2, FaultTakeover: 2}, true)
	if rep.Duplicates != 0 {
		t.Errorf("%d duplicates in exactly-once mode, want 0", rep.Duplicates)
	}
}

// TestChaosNetworkAndCrashShort is the short run of the network and crash
// faults against one broker: PostgreSQL crashing, a partition from it (a
// black hole, detected by --server-timeout) and resets of outboxd's
// connections to it mid-stream, a stalled broker and a partition from the
// broker. Nothing lost, leaked or reordered; each fault within its bound
// (none for the Kafka ones).
func TestChaosNetworkAndCrashShort(t *testing.T) {
	t.Parallel()
	faults := map[Fault]int{FaultPostgresCrash: 2, FaultPostgresPartition: 1, FaultPostgresReset: 1, FaultBrokerStall: 1, FaultKafkaPartition: 1}
	rep := runChaos(t, 20000, faults, false)
	if len(rep.DetectMS[FaultPostgresPartition]) != 1 {
		t.Errorf("partition from PostgreSQL detected %v, want once", rep.DetectMS[FaultPostgresPartition])
	}
}

// TestChaosKafkaClusterShort is the short run against three brokers
// (replication factor 3, min.insync.replicas 2): a partition leader and
// the active controller killed, two of three brokers lost (the slot must
// not be confirmed meanwhile: a problem in the report otherwise), and a
// rolling restart. No duplicate may come of any of them.
func TestChaosKafkaClusterShort(t *testing.T) {
	t.Parallel()
	faults := map[Fault]int{FaultLeaderKill: 1, FaultControllerKill: 1, FaultMajorityLoss: 1, FaultRollingRestart: 1, FaultKill9: 1}
	rep := runChaosOn(t, 3, 20000, faults, false)
	for _, f := range clusterFaults {
		if n := rep.DuplicatesByFault[f]; n > 0 {
			t.Errorf("%d duplicates after %s, want none", n, f)
		}
	}
}
