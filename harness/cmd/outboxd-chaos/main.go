// Command outboxd-chaos proves outboxd's guarantees under faults (see
// package harness/chaos): it writes outbox events from concurrent writers
// while injecting kill -9, SIGTERM restarts, broker and PostgreSQL restarts,
// walsender terminations and standby takeovers, then reads the topic back
// with an independent consumer and reports lost, duplicated, reordered and
// leaked events. It exits 1 when anything was lost, leaked or reordered.
//
// With -fleet it runs many pipelines over several replicas of `outboxd run
// --config FILE` instead (package chaos, RunFleet): kill -9 and SIGTERM of
// a replica, walsender terminations, a database refusing connections, a
// poison row and a transaction coordinator's death, each pipeline checked
// on its own.
//
//	make chaos                      # the long runs (1,000,000 events), then the fleet run
//	go run ./harness/cmd/outboxd-chaos -h   # flags
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/outboxd/outboxd/harness/chaos"
	"github.com/outboxd/outboxd/harness/testbed"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outboxd-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := chaos.Options{Faults: map[chaos.Fault]int{}}
	fs.StringVar(&o.Outboxd, "outboxd", "bin/outboxd", "the outboxd binary to run (make build)")
	fs.StringVar(&o.Script, "testbed", envOr(testbed.ScriptEnv, "harness/testbed/testbed.sh"), "the test bed script that starts PostgreSQL and Kafka")
	fs.IntVar(&o.Events, "events", 1_000_000, "committed events to write")
	fs.IntVar(&o.Writers, "writers", 4, "concurrent writers")
	fs.IntVar(&o.Aggregates, "aggregates", 50, "aggregates per writer")
	fs.IntVar(&o.MaxInFlight, "max-in-flight-records", 10000, "outboxd --max-in-flight-records (bounds the duplicates)")
	fs.BoolVar(&o.ExactlyOnce, "exactly-once", false, "run outboxd with --delivery exactly-once and read back with read_committed: no duplicate is allowed")
	fs.IntVar(&o.TxnMaxRecords, "transaction-max-records", 0, "with -exactly-once: outboxd --transaction-max-records (small: many Kafka transactions); 0: outboxd's default")
	fs.IntVar(&o.MinKafkaTransactions, "min-kafka-transactions", 0, "with -exactly-once: fail unless the run commits at least this many Kafka transactions on the transactional id, "+
		"and, past 32767 of them, unless outboxd logs the new producer id Kafka hands out when the epoch runs out")
	fs.BoolVar(&o.DecodeOnStandby, "decode-on-standby", false, "outboxd decodes on a synchronous physical standby of the primary (--primary-url; PostgreSQL 16+); "+
		"its faults ("+faultNames(standbyOnly)+") then default to a few each, and the faults that read or cut the primary's slot, or make standbys of their own, to none")
	fs.IntVar(&o.Rate, "rate", 0, "the writers' steady rate in events a second; 0: as fast as they can")
	seed := fs.Uint64("seed", 1, "seed of the writers and the fault order")
	counts := map[chaos.Fault]*int{}
	fs.IntVar(&o.KafkaNodes, "kafka-nodes", 1, "1: one broker, behind a fault-injecting proxy; 3: a three-broker cluster (replication factor 3, min.insync.replicas 2), "+
		"whose faults ("+faultNames(clusterOnly)+") then default to a few each and the single broker's ("+faultNames(singleOnly)+") to none")
	defaults := map[chaos.Fault]int{chaos.FaultKill9: 20, chaos.FaultSIGTERM: 5, chaos.FaultBroker: 5, chaos.FaultPostgres: 3, chaos.FaultWalsender: 10, chaos.FaultTakeover: 5, chaos.FaultFailover: 3,
		chaos.FaultPostgresCrash: 3, chaos.FaultPostgresPartition: 3, chaos.FaultPostgresReset: 3, chaos.FaultBrokerStall: 3, chaos.FaultKafkaPartition: 3}
	clusterDefaults := map[chaos.Fault]int{chaos.FaultLeaderKill: 3, chaos.FaultControllerKill: 2, chaos.FaultMajorityLoss: 2, chaos.FaultRollingRestart: 1}
	for _, f := range chaos.AllFaults {
		counts[f] = fs.Int(string(f), defaults[f], fmt.Sprintf("%s faults to inject", f))
	}
	for _, f := range fleetOnly() {
		counts[f] = fs.Int(string(f), 0, fmt.Sprintf("with -fleet: %s faults to inject", f))
	}
	fo := fleetFlags(fs)
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	verbose := fs.Bool("v", false, "show outboxd's logs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Seed = *seed
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *fo.on {
		return runFleet(fo, o, counts, set, *jsonOut, *verbose, stdout, stderr)
	}
	for _, f := range fleetOnly() {
		if *counts[f] > 0 {
			fmt.Fprintf(stderr, "outboxd-chaos: -%s is a fleet run's fault: give -fleet\n", f)
			return 2
		}
	}
	standbyDefaults := map[chaos.Fault]int{chaos.FaultKill9: 5, chaos.FaultSIGTERM: 2, chaos.FaultPostgres: 2, chaos.FaultPostgresCrash: 2, chaos.FaultWalsender: 3,
		chaos.FaultBroker: 2, chaos.FaultStandbyCrash: 3, chaos.FaultStandbyPromote: 1}
	for f, n := range counts {
		o.Faults[f] = *n
		if o.DecodeOnStandby && !set[string(f)] {
			o.Faults[f] = standbyDefaults[f]
		} else if slices.Contains(standbyOnly, f) && !set[string(f)] {
			o.Faults[f] = 0
		}
		if o.KafkaNodes >= 3 && !set[string(f)] {
			if slices.Contains(singleOnly, f) {
				o.Faults[f] = 0
			} else if d, ok := clusterDefaults[f]; ok {
				o.Faults[f] = d
			}
		}
	}
	o.Log = slog.New(slog.NewTextHandler(stderr, nil))
	if *verbose {
		o.PublisherLog = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "outboxd-chaos:", err)
		return 1
	}
	return report(stdout, stderr, rep, func(w io.Writer) { printTable(w, rep) }, *jsonOut, rep.OK(),
		"events were lost, leaked or reordered, or a publisher misbehaved")
}

// report prints a run's table (table) and its report as JSON, writes the
// JSON to jsonOut when given, and returns the exit code: 1 when the
// verdict failed (ok false, failed saying what) or the file could not be
// written.
func report(stdout, stderr io.Writer, rep any, table func(io.Writer), jsonOut string, ok bool, failed string) int {
	table(stdout)
	js, _ := json.MarshalIndent(rep, "", "  ")
	fmt.Fprintf(stdout, "%s\n", js)
	if jsonOut != "" {
		if err := os.WriteFile(jsonOut, append(js, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "outboxd-chaos:", err)
			return 1
		}
	}
	if !ok {
		fmt.Fprintln(stderr, "outboxd-chaos: FAILED: "+failed)
		return 1
	}
	return 0
}

// The faults only a cluster, or only a single broker, can have.
var (
	clusterOnly = []chaos.Fault{chaos.FaultLeaderKill, chaos.FaultControllerKill, chaos.FaultMajorityLoss, chaos.FaultRollingRestart}
	singleOnly  = []chaos.Fault{chaos.FaultBroker, chaos.FaultBrokerStall, chaos.FaultKafkaPartition}
	standbyOnly = []chaos.Fault{chaos.FaultStandbyCrash, chaos.FaultStandbyPromote}
)

func faultNames(fs []chaos.Fault) string {
	var s []string
	for _, f := range fs {
		s = append(s, string(f))
	}
	return strings.Join(s, ", ")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func printTable(w io.Writer, r chaos.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "delivery\t%s\n", r.Delivery)
	if r.DecodedOn != "" {
		fmt.Fprintf(tw, "decoded on\t%s\n", r.DecodedOn)
	}
	fmt.Fprintf(tw, "committed\t%d\n", r.Committed)
	fmt.Fprintf(tw, "published records\t%d\n", r.Published)
	fmt.Fprintf(tw, "unique\t%d\n", r.Unique)
	fmt.Fprintf(tw, "lost\t%d\n", r.Lost)
	fmt.Fprintf(tw, "duplicates\t%d (bound %d)\n", r.Duplicates, r.DuplicateBound)
	if n := r.DuplicatesByFault["none"]; n > 0 {
		fmt.Fprintf(tw, "duplicates: before any fault\t%d (bound 0)\n", n)
	}
	fmt.Fprintf(tw, "order violations\t%d\n", r.OrderViolations)
	fmt.Fprintf(tw, "leaked rolled-back rows\t%d\n", r.Leaked)
	fmt.Fprintf(tw, "published, then lost with a failed primary\t%d\n", r.LostInFailover)
	fmt.Fprintf(tw, "rolled-back transactions\t%d\n", r.RolledBackTransactions)
	fmt.Fprintf(tw, "kafka\t%d broker(s)\n", r.KafkaNodes)
	for _, f := range chaos.AllFaults {
		if r.FaultsInjected[f] == 0 {
			continue
		}
		fmt.Fprintf(tw, "faults: %s\t%d, duplicates %d (bound %d)", f, r.FaultsInjected[f], r.DuplicatesByFault[f], r.DuplicateBoundByFault[f])
		if d := r.DetectMS[f]; len(d) > 0 {
			fmt.Fprintf(tw, ", detected after %v ms", d)
		}
		if d := r.RecoverMS[f]; len(d) > 0 {
			fmt.Fprintf(tw, ", recovered %v ms after it", d)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "peak write rate\t%d events per 100 ms\n", r.MaxEventsPer100ms)
	fmt.Fprintf(tw, "standby takeover\tmedian %.0f ms, max %.0f ms over %d\n", r.TakeoverMedianMS, r.TakeoverMaxMS, len(r.TakeoverMS))
	fmt.Fprintf(tw, "failover recovery\t%v ms, backfilled %v rows\n", r.FailoverMS, r.FailoverBackfillRows)
	if r.KafkaTransactions > 0 {
		fmt.Fprintf(tw, "kafka transactions\t%d\n", r.KafkaTransactions)
	}
	for _, l := range r.ProducerIDLines {
		fmt.Fprintf(tw, "producer id\t%s\n", l)
	}
	fmt.Fprintf(tw, "total time\t%.1f s\n", r.TotalSeconds)
	for _, p := range append(r.Examples, r.Problems...) {
		fmt.Fprintf(tw, "problem\t%s\n", p)
	}
	tw.Flush()
}
