package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/harness/netfault"
	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/slot"
)

// Fault is a kind of fault the run injects.
type Fault string

// The faults, in the order reports list them.
const (
	FaultKill9     Fault = "kill9"
	FaultSIGTERM   Fault = "sigterm_restart"
	FaultBroker    Fault = "broker_restart"
	FaultPostgres  Fault = "postgres_restart"
	FaultWalsender Fault = "walsender_terminate"
	FaultTakeover  Fault = "standby_takeover"
	FaultFailover  Fault = "postgres_failover"
	// PostgreSQL crashes (pg_ctl stop -m immediate) and recovers.
	FaultPostgresCrash Fault = "postgres_crash"
	// A black hole between outboxd and PostgreSQL (bytes dropped, no
	// reset: a partition, a half-open connection) for longer than
	// outboxd's --server-timeout, then healed.
	FaultPostgresPartition Fault = "postgres_partition"
	// Every connection from outboxd to PostgreSQL reset (RST) as soon as
	// the server sends on it: mid-transaction on the stream.
	FaultPostgresReset Fault = "postgres_reset"
	// The broker stops answering (SIGSTOP: connections open, nothing
	// read) for 5-10 s, then goes on (SIGCONT). Single broker only.
	FaultBrokerStall Fault = "broker_stall"
	// A black hole between the clients and the broker for 5-15 s. Single
	// broker only.
	FaultKafkaPartition Fault = "kafka_partition"
	// Three-broker cluster only (Options.KafkaNodes 3): kill -9 the
	// leader of a partition of the topic, or the active KRaft controller;
	// lose two of the three brokers for a while (the producer must block
	// and the slot must not advance); restart every broker in turn.
	FaultLeaderKill     Fault = "leader_kill9"
	FaultControllerKill Fault = "controller_kill9"
	FaultMajorityLoss   Fault = "broker_majority_loss"
	FaultRollingRestart Fault = "rolling_restart"
	// Options.DecodeOnStandby only: the standby outboxd decodes on
	// crashes (pg_ctl stop -m immediate) and recovers; the primary dies
	// and that standby is promoted (the last fault of a run: there is no
	// standby after it).
	FaultStandbyCrash   Fault = "standby_crash"
	FaultStandbyPromote Fault = "standby_promote"
)

// AllFaults lists every kind.
var AllFaults = []Fault{FaultKill9, FaultSIGTERM, FaultBroker, FaultPostgres, FaultWalsender, FaultTakeover, FaultFailover,
	FaultPostgresCrash, FaultPostgresPartition, FaultPostgresReset, FaultBrokerStall, FaultKafkaPartition,
	FaultLeaderKill, FaultControllerKill, FaultMajorityLoss, FaultRollingRestart, FaultStandbyCrash, FaultStandbyPromote}

// clusterFaults need Options.KafkaNodes 3; singleFaults a single broker.
var (
	clusterFaults = []Fault{FaultLeaderKill, FaultControllerKill, FaultMajorityLoss, FaultRollingRestart}
	singleFaults  = []Fault{FaultBroker, FaultBrokerStall, FaultKafkaPartition}
	// standbyFaults need Options.DecodeOnStandby; onStandbyFaults are
	// those a run decoding on a standby injects (the others read or cut
	// the primary's slot, or make standbys of their own).
	standbyFaults   = []Fault{FaultStandbyCrash, FaultStandbyPromote}
	onStandbyFaults = []Fault{FaultKill9, FaultSIGTERM, FaultBroker, FaultPostgres, FaultPostgresCrash, FaultWalsender, FaultStandbyCrash, FaultStandbyPromote}
)

// Options configures a run.
type Options struct {
	Outboxd     string        // path of the outboxd binary
	Script      string        // internal/testbed/testbed.sh
	Events      int           // committed events to write
	Writers     int           // concurrent writers
	Aggregates  int           // aggregates per writer
	Faults      map[Fault]int // how many of each to inject while writing
	Seed        uint64        // for the writers and the fault order
	MaxInFlight int           // outboxd --max-in-flight-records
	ExactlyOnce bool          // outboxd --delivery exactly-once; read back with read_committed, no duplicate allowed
	KafkaNodes  int           // 1 (default): one broker, behind a fault-injecting proxy; 3: a three-broker cluster (replication factor 3, min.insync.replicas 2)
	Rate        int           // when positive, the writers' steady rate in events a second (a soak) instead of as fast as they can
	// DecodeOnStandby runs outboxd against a physical standby of the
	// primary (PostgreSQL 16+): --database-url the standby's,
	// --primary-url one URL over both servers (target_session_attrs
	// read-write), the writers' too. The standby is synchronous, so that
	// its promotion loses no commit a writer saw.
	DecodeOnStandby bool
	// TxnMaxRecords, with ExactlyOnce: outboxd --transaction-max-records
	// (small: many Kafka transactions). MinKafkaTransactions: the run
	// fails unless the publishers committed at least this many on the
	// transactional id (past 32,767, unless a new producer id is logged).
	TxnMaxRecords, MinKafkaTransactions int
	SampleEvery                         time.Duration // when positive, the active publisher's memory, goroutines, open files and records in flight are sampled this often (its /metrics)
	Log                                 *slog.Logger  // the run's own progress
	PublisherLog                        io.Writer     // outboxd's logs, prefixed; nil: dropped
}

// Report is the outcome of a run.
type Report struct {
	Result
	Delivery        string `json:"delivery"`
	PostgresVersion int    `json:"postgres_version_num"`
	// DecodedOn is "standby" when outboxd decoded on a physical standby
	// (Options.DecodeOnStandby), else empty: on the primary.
	DecodedOn              string        `json:"decoded_on,omitempty"`
	RolledBackTransactions int           `json:"rolled_back_transactions"`
	FaultsInjected         map[Fault]int `json:"faults_injected"`
	TakeoverMS             []float64     `json:"standby_takeover_ms"`
	TakeoverMedianMS       float64       `json:"standby_takeover_median_ms"`
	TakeoverMaxMS          float64       `json:"standby_takeover_max_ms"`
	// Timings per fault kind, for the network, crash and cluster faults:
	// from the fault to outboxd noticing it (where it logs that), and to
	// the first record written after it reaching a consumer, from the
	// fault's end (partitions, stalls, resets, the brokers' return, the
	// last restart of a rolling one) or, for a crash and a kill, from the
	// fault itself.
	DetectMS   map[Fault][]float64 `json:"detect_ms,omitempty"`
	RecoverMS  map[Fault][]float64 `json:"recover_ms,omitempty"`
	KafkaNodes int                 `json:"kafka_nodes"`
	Samples    []Sample            `json:"samples,omitempty"`
	// FaultsAt is when each fault was injected, in seconds since the start.
	FaultsAt []FaultAt `json:"faults_at,omitempty"`
	// Each failover: from the primary's death to the recovery's backfill
	// acknowledged, and the rows the backfill published (its predicate is
	// the duplicate bound of the fault).
	FailoverMS            []float64     `json:"postgres_failover_ms"`
	FailoverBackfillRows  []int64       `json:"postgres_failover_backfill_rows"`
	DuplicateBound        int           `json:"duplicate_bound"`
	DuplicatesByFault     map[Fault]int `json:"duplicates_by_fault"`      // each duplicate under the last fault before the broker appended it
	DuplicateBoundByFault map[Fault]int `json:"duplicate_bound_by_fault"` // see faultBound
	MaxEventsPer100ms     int           `json:"max_events_per_100ms"`     // the writers' peak rate, for the bound
	MaxInFlightRecords    int           `json:"max_in_flight_records"`
	TotalSeconds          float64       `json:"total_seconds"`
	Problems              []string      `json:"problems,omitempty"` // publisher misbehaviour seen during the run
	// With ExactlyOnce: the Kafka transactions committed (the progress
	// records of the run's slot), and the publishers' log lines naming
	// their producer id and epoch (at each start, and each new id).
	KafkaTransactions int      `json:"kafka_transactions,omitempty"`
	ProducerIDLines   []string `json:"producer_id_lines,omitempty"`
}

// FaultAt is a fault and when it was injected.
type FaultAt struct {
	Fault   Fault   `json:"fault"`
	Seconds float64 `json:"seconds"`
}

// OK reports whether the run found no loss, leak, reorder or problem.
func (r Report) OK() bool { return r.Result.OK() && len(r.Problems) == 0 }

const (
	slotName = "chaos"
	// maxTxnRows is the largest transaction the writers commit.
	maxTxnRows = 20
	// confirmPeriods is how many of outboxd's 100 ms confirmation periods
	// an acknowledged transaction may wait before it is confirmed: the
	// status goes out at least 100 ms after the last one, checked at
	// least every 100 ms.
	confirmPeriods = 2
	// slotSyncPeriods is how many 100 ms periods a standby's copy of a
	// failover slot may trail the primary's: PostgreSQL 17's slot sync
	// worker naps 200 ms after a cycle that changed a slot, doubling (up
	// to 30 s) after each that did not; the primary's slot moves with every
	// confirmation (each --status-interval, 500 ms here), so the nap stays
	// under a second.
	slotSyncPeriods = 10
)

// faultBound is the documented bound on the duplicates one fault of a kind
// may cause (docs/guarantees.md; a failover's is the rows its recovery
// backfilled, counted as it happens, or with a failover slot (17+) a
// kill -9's plus slotSyncPeriods at the peak rate):
//   - kill -9 and standby takeover (the active is killed): everything not
//     yet confirmed: the records in flight (--max-in-flight-records), what
//     Kafka acknowledged in the last confirmation periods (the peak rate
//     times 2 x 100 ms), and the open transaction;
//   - a walsender termination or a PostgreSQL restart: the transaction
//     that was open (at most maxTxnRows rows);
//   - a PostgreSQL crash, a partition from it (detected by
//     --server-timeout) or a reset of its connections: the same, the open
//     transaction (the session drains what Kafka has before it reconnects);
//   - SIGTERM, and every Kafka fault (a broker restart, stall, partition,
//     a leader or controller killed, two of three brokers lost, a rolling
//     restart): none;
//   - in exactly-once mode, none for any fault.
func faultBound(f Fault, exactlyOnce bool, maxInFlight, per100ms int) int {
	if exactlyOnce {
		return 0
	}
	switch f {
	case FaultKill9, FaultTakeover:
		return maxInFlight + confirmPeriods*per100ms + maxTxnRows
	case FaultWalsender, FaultPostgres, FaultPostgresCrash, FaultPostgresPartition, FaultPostgresReset, FaultStandbyCrash, FaultStandbyPromote:
		return maxTxnRows
	}
	// SIGTERM, and every Kafka fault: the producer is idempotent and
	// never gives a record up, and the slot waits for it.
	return 0
}

// Run executes one chaos run and checks it.
func Run(ctx context.Context, o Options) (rep Report, err error) {
	start := time.Now()
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 10000
	}
	if o.Writers <= 0 {
		o.Writers = 4
	}
	if o.Aggregates <= 0 {
		o.Aggregates = 20
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.ExactlyOnce && o.Faults[FaultFailover] > 0 {
		return rep, errors.New("a failover is recovered with a backfill, which exactly-once mode does not support yet: run it with at-least-once")
	}
	if o.KafkaNodes <= 0 {
		o.KafkaNodes = 1
	}
	if err := checkFaults(o); err != nil {
		return rep, err
	}
	log := o.Log
	rep.KafkaNodes = o.KafkaNodes

	pg, err := testbed.StartPostgres(ctx, o.Script)
	if err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, pg.Remove(context.WithoutCancel(ctx))) }()
	srv, err := startKafka(ctx, o)
	if err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, srv.remove(context.WithoutCancel(ctx))) }()
	// outboxd reaches PostgreSQL through a proxy (network faults); the
	// writers and the checks connect directly.
	if err := queryRow(ctx, pg.URL, `SELECT current_setting('server_version_num')::int`, nil, &rep.PostgresVersion); err != nil {
		return rep, err
	}
	// writeURL is where the writers write, slotURL where the slot is.
	writeURL, slotURL, migrateArgs := pg.URL, pg.URL, []string{"--database-url", pg.URL}
	var standby *testbed.Postgres
	if o.DecodeOnStandby {
		if rep.PostgresVersion < slot.StandbyVersion {
			return rep, fmt.Errorf("decoding on a standby needs PostgreSQL 16 or later; this is %d", rep.PostgresVersion)
		}
		if standby, err = pg.StartStandby(ctx); err != nil {
			return rep, err
		}
		defer func() { err = errors.Join(err, standby.Remove(context.WithoutCancel(ctx))) }()
		if err := execSQL(ctx, pg.URL, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
			return rep, err
		}
		if err := execSQL(ctx, pg.URL, `SELECT pg_reload_conf()`); err != nil {
			return rep, err
		}
		if writeURL, err = bothHosts(pg.URL, standby.URL); err != nil {
			return rep, err
		}
		slotURL = standby.URL
		migrateArgs = []string{"--database-url", standby.URL, "--primary-url", writeURL}
		rep.DecodedOn = "standby"
	}
	// outboxd reaches PostgreSQL (the slot's server) through a proxy
	// (network faults); the writers and the checks connect directly.
	pgProxy, pgVia, err := proxyFor(slotURL)
	if err != nil {
		return rep, err
	}
	defer pgProxy.Close()
	brokers := srv.brokers()
	log.Info("servers up", "postgres", pg.URL, "slot_on", slotURL, "kafka", brokers)

	topic := "chaos.events"
	// Append times tell which fault each duplicate followed.
	if err := createTopic(ctx, brokers, topic, 6, int16(min(o.KafkaNodes, 3)), map[string]*string{"message.timestamp.type": ptr("LogAppendTime")}); err != nil {
		return rep, err
	}
	if out, err := runCmd(ctx, o.Outboxd, append(append([]string{"migrate"}, migrateArgs...), "--slot", slotName)...); err != nil {
		return rep, fmt.Errorf("outboxd migrate: %w\n%s", err, out)
	}
	if err := execSQL(ctx, pg.URL, `CREATE TABLE IF NOT EXISTS chaos_other (id bigserial PRIMARY KEY, note text)`); err != nil {
		return rep, err
	}

	rep.Delivery = "at-least-once"
	if o.ExactlyOnce {
		rep.Delivery = "exactly-once"
	}
	pids := &producerLog{next: o.PublisherLog}
	f := &publishers{binary: o.Outboxd, url: pgVia, logOut: pids,
		args: []string{"--slot", slotName, "--status-interval", "500ms", "--server-timeout", serverTimeout.String(), "--slot-retry-interval", "200ms",
			"--reconnect-max-interval", "2s", "--max-in-flight-records", strconv.Itoa(o.MaxInFlight), "--log-level", "info",
			"--wal-check-interval", "500ms", // keeps outboxd_slots' acknowledged commit time fresh for a failover's recovery
			"--delivery", rep.Delivery},
		env: []string{"OUTBOXD_BROKERS=" + strings.Join(brokers, ",")}}
	if o.DecodeOnStandby {
		f.args = append(f.args, "--primary-url", writeURL)
	}
	var metricsAddr string
	if o.SampleEvery > 0 {
		if metricsAddr, err = netfault.FreeAddr(); err != nil {
			return rep, err
		}
		f.args = append(f.args, "--metrics-addr", metricsAddr)
	}
	if o.ExactlyOnce {
		// Committing more often than the slot is confirmed (every 100 ms),
		// a kill finds transactions committed to Kafka that the slot does
		// not have yet: the next process gets them again from the slot and
		// must skip them by the progress topic.
		f.args = append(f.args, "--transaction-interval", "25ms")
		if o.TxnMaxRecords > 0 {
			f.args = append(f.args, "--transaction-max-records", strconv.Itoa(o.TxnMaxRecords))
		}
	}
	active, err := f.start()
	if err != nil {
		return rep, err
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	err = active.waitLog(wctx, "msg=streaming")
	wcancel()
	if err != nil {
		return rep, err
	}

	l := &ledger{}
	faults := schedule(o.Faults, o.Seed)
	if o.DecodeOnStandby {
		// After a promotion there is no standby: it comes last.
		faults = promotionLast(faults)
	}
	thresholds := make([]int64, len(faults)+2)
	for k := range thresholds {
		thresholds[k] = min(int64(o.Events), int64(k+1)*int64(o.Events)/int64(len(faults)+1))
	}
	thresholds[len(faults)+1] = int64(o.Events) + 1<<40
	l.gate.Store(thresholds[1])
	if len(faults) == 0 {
		l.gate.Store(1 << 60)
	}

	live := newLiveConsumer(brokers, topic)
	rep.FaultsInjected = map[Fault]int{}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return live.run(gctx) })
	var peak atomic.Int64 // most events committed in a 100 ms window
	g.Go(func() error {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		last := l.events.Load()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
			}
			now := l.events.Load()
			if d := now - last; d > peak.Load() {
				peak.Store(d)
			}
			last = now
			if now >= int64(o.Events) && l.gate.Load() >= 1<<60 {
				return nil
			}
		}
	})
	var samples []Sample
	sctx, stopSampling := context.WithCancel(gctx)
	defer stopSampling()
	if o.SampleEvery > 0 {
		g.Go(func() error { return sample(sctx, metricsAddr, o.SampleEvery, start, l, &samples) })
	}
	var marks []Mark
	var writersDone sync.WaitGroup
	for w := range o.Writers {
		writersDone.Add(1)
		g.Go(func() error {
			defer writersDone.Done()
			wr := newWriter(w, writeURL, topic, o.Aggregates, l, int64(o.Events), o.Seed, log)
			wr.rate = float64(o.Rate) / float64(o.Writers)
			return wr.run(gctx)
		})
	}
	inj := &injector{publishers: f, pg: pg, standby: standby, writeURL: writeURL, slotURL: slotURL, exactlyOnce: o.ExactlyOnce, kafka: srv.single, cluster: srv.cluster, kafkaProxy: srv.proxy, pgProxy: pgProxy,
		topic: topic, brokers: brokers, events: int64(o.Events), live: live, ledger: l, log: log, rng: rand.New(rand.NewPCG(o.Seed, 99)),
		detect: map[Fault][]float64{}, recover: map[Fault][]float64{}}
	inj.active = active
	faultErr := func() error {
		defer l.gate.Store(1 << 60) // whatever happens, let the writers finish
		for k, fault := range faults {
			for l.events.Load() < thresholds[k] {
				if err := gctx.Err(); err != nil {
					return err
				}
				if err := inj.checkActive(); err != nil {
					return err
				}
				time.Sleep(10 * time.Millisecond)
			}
			log.Info("injecting fault", "fault", fault, "n", k+1, "of", len(faults), "events", l.events.Load())
			marks = append(marks, Mark{Fault: fault, At: time.Now()})
			if err := inj.inject(gctx, fault); err != nil {
				return fmt.Errorf("injecting %s: %w", fault, err)
			}
			rep.FaultsInjected[fault]++
			// Recovered once the slot confirmed what was written up to
			// now: the fault's re-sends are then in Kafka, before the next
			// fault's (see Result.DuplicatesByFault).
			if err := waitConfirmed(gctx, writeURL, slotURL, 2*time.Minute); err != nil {
				return fmt.Errorf("recovering from %s: %w", fault, err)
			}
			l.gate.Store(thresholds[k+2])
		}
		return nil
	}()
	if faultErr != nil {
		rep.Problems = append(rep.Problems, faultErr.Error())
	}
	writersDone.Wait()
	log.Info("writes done", "events", l.events.Load(), "rolled_back_transactions", l.rollback.Load())
	if err := inj.checkActive(); err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}

	// Everything committed must be confirmed by the slot.
	if err := waitConfirmed(ctx, writeURL, slotURL, 5*time.Minute); err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	if code, err := inj.active.terminate(time.Minute); err != nil || code != 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("final SIGTERM: exit code %d, %v; log tail:\n%s", code, err, inj.active.tail()))
	}
	live.stop()
	stopSampling()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return rep, err
	}
	rep.Problems = append(rep.Problems, inj.problems...)

	delivered, err := readAll(ctx, brokers, topic, o.ExactlyOnce)
	if err != nil {
		return rep, err
	}
	rep.Result = Check(l.committed, l.rolledBack, l.lostInFailover, delivered)
	if o.ExactlyOnce {
		if rep.KafkaTransactions, err = countKafkaTransactions(ctx, slotURL, brokers); err != nil {
			return rep, err
		}
		rep.ProducerIDLines = pids.lines()
		if o.MinKafkaTransactions > 0 {
			checkEpochs(&rep, o.MinKafkaTransactions)
		}
	}
	rep.RolledBackTransactions = int(l.rollback.Load())
	rep.TakeoverMS = inj.takeovers
	rep.DetectMS, rep.RecoverMS = inj.detect, inj.recover
	rep.Samples = samples // the sampler ended with g.Wait
	for _, m := range marks {
		rep.FaultsAt = append(rep.FaultsAt, FaultAt{Fault: m.Fault, Seconds: m.At.Sub(start).Seconds()})
	}
	rep.FailoverMS, rep.FailoverBackfillRows = inj.failovers, inj.backfilled
	if len(inj.takeovers) > 0 {
		s := append([]float64(nil), inj.takeovers...)
		sort.Float64s(s)
		rep.TakeoverMedianMS = s[len(s)/2]
		rep.TakeoverMaxMS = s[len(s)-1]
	}
	rep.MaxInFlightRecords = o.MaxInFlight
	rep.MaxEventsPer100ms = int(peak.Load())
	rep.DuplicatesByFault = rep.Result.DuplicatesByFault(marks)
	rep.DuplicateBoundByFault = map[Fault]int{}
	for fault, n := range rep.FaultsInjected {
		b := n * faultBound(fault, o.ExactlyOnce, o.MaxInFlight, rep.MaxEventsPer100ms)
		if fault == FaultFailover {
			for _, rows := range inj.backfilled {
				b += int(rows)
				if rep.PostgresVersion >= slot.FailoverVersion { // a failover slot: its copy trails the primary's by a sync period
					b += o.MaxInFlight + (confirmPeriods+slotSyncPeriods)*rep.MaxEventsPer100ms + maxTxnRows
				}
			}
		}
		rep.DuplicateBoundByFault[fault] = b
		rep.DuplicateBound += b
	}
	// At most the transaction each writer had in flight when a primary died.
	if bound := (rep.FaultsInjected[FaultFailover] + rep.FaultsInjected[FaultStandbyPromote]) * o.Writers * maxTxnRows; rep.LostInFailover > bound {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d records of commits lost in failovers, over their bound %d (a transaction per writer per failover)", rep.LostInFailover, bound))
	}
	for fault, n := range rep.DuplicatesByFault {
		if n > rep.DuplicateBoundByFault[fault] {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%d duplicates after %s faults, over their bound %d", n, fault, rep.DuplicateBoundByFault[fault]))
		}
	}
	rep.TotalSeconds = time.Since(start).Seconds()
	return rep, nil
}

// promotionLast moves a standby's promotion to the end of faults.
func promotionLast(faults []Fault) []Fault {
	var out, last []Fault
	for _, f := range faults {
		if f == FaultStandbyPromote {
			last = append(last, f)
		} else {
			out = append(out, f)
		}
	}
	return append(out, last...)
}

// bothHosts is one URL over the primary's and the standby's hosts that
// connects to whichever is the primary (target_session_attrs=read-write),
// as the application and --primary-url name them.
func bothHosts(primary, standby string) (string, error) {
	p, err := url.Parse(primary)
	if err != nil {
		return "", err
	}
	s, err := url.Parse(standby)
	if err != nil {
		return "", err
	}
	q := p.Query()
	q.Set("target_session_attrs", "read-write")
	p.Host, p.RawQuery = p.Host+","+s.Host, q.Encode()
	return p.String(), nil
}

// schedule returns the faults to inject in a random order.
func schedule(counts map[Fault]int, seed uint64) []Fault {
	return scheduleOf(AllFaults, counts, seed)
}

// scheduleOf returns the faults of kinds to inject in a random order.
func scheduleOf(kinds []Fault, counts map[Fault]int, seed uint64) []Fault {
	var out []Fault
	for _, f := range kinds {
		for range counts[f] {
			out = append(out, f)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func ptr[T any](v T) *T { return &v }

func createTopic(ctx context.Context, brokers []string, topic string, partitions int32, replicas int16, configs map[string]*string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, replicas, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	return nil
}

func execSQL(ctx context.Context, url, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// waitConfirmed waits until the slot (on slotURL's server) confirmed the
// primary's (writeURL's) current WAL position (d 0: checks once).
func waitConfirmed(ctx context.Context, writeURL, slotURL string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var target pglogrepl.LSN
	var last string
	for first := true; first || time.Now().Before(deadline); first = false {
		var cur, confirmed string
		err := queryRow(ctx, writeURL, `SELECT pg_current_wal_lsn()::text`, nil, &cur)
		if err == nil {
			err = queryRow(ctx, slotURL, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, []any{slotName}, &confirmed)
			if err == nil {
				c, _ := pglogrepl.ParseLSN(cur)
				f, _ := pglogrepl.ParseLSN(confirmed)
				if target == 0 {
					target = c
				}
				if f >= target {
					return nil
				}
				last = confirmed
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("slot %s did not confirm %s within %s (confirmed %s)", slotName, target, d, last)
}

// readAll reads the topic from the beginning up to its end offsets with a
// fresh consumer; with readCommitted, as a read_committed consumer (the
// control records are kept to see where a partition ends: a commit marker
// is its last offset).
func readAll(ctx context.Context, brokers []string, topic string, readCommitted bool) ([]Delivered, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords()}
	if readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	var out []Delivered
	err = readToEnd(ctx, cl, topic, ends, func(r *kgo.Record) error {
		d, err := parseRecord(r)
		out = append(out, d)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readToEnd polls cl (consuming topic from its start, with control records
// kept) until every partition reached its offset in ends, handing fn each
// record that is not a control record.
func readToEnd(ctx context.Context, cl *kgo.Client, topic string, ends kadm.ListedOffsets, fn func(*kgo.Record) error) error {
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	deadline := time.Now().Add(5 * time.Minute)
	for len(remaining) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("reading %s back: partitions %v not read to their end", topic, remaining)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := remaining[r.Partition]; ok && r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
			if r.Attrs.IsControl() || ferr != nil {
				return
			}
			ferr = fn(r)
		})
		if ferr != nil {
			return ferr
		}
	}
	return nil
}

func parseRecord(r *kgo.Record) (Delivered, error) {
	d := Delivered{Partition: r.Partition, Offset: r.Offset, ID: -1, Appended: r.Timestamp}
	for _, h := range r.Headers {
		if h.Key == "id" {
			id, err := strconv.ParseInt(string(h.Value), 10, 64)
			if err != nil {
				return d, fmt.Errorf("record %d/%d: id header %q: %w", r.Partition, r.Offset, h.Value, err)
			}
			d.ID = id
		}
	}
	var p struct {
		Agg string `json:"agg"`
		Seq int    `json:"seq"`
	}
	if err := json.Unmarshal(r.Value, &p); err != nil {
		return d, fmt.Errorf("record %d/%d: payload: %w", r.Partition, r.Offset, err)
	}
	d.Agg, d.Seq = p.Agg, p.Seq
	return d, nil
}

// liveConsumer follows the topic during the run to time standby takeovers:
// after a kill, the first record whose id was allocated after the kill can
// only come from the standby.
type liveConsumer struct {
	brokers    []string
	topic      string
	watchAbove atomic.Int64 // 0: not watching
	seen       chan time.Time
	cancel     context.CancelFunc
	mu         sync.Mutex
}

func newLiveConsumer(brokers []string, topic string) *liveConsumer {
	return &liveConsumer{brokers: brokers, topic: topic, seen: make(chan time.Time, 1)}
}

func (c *liveConsumer) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(c.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			above := c.watchAbove.Load()
			if above == 0 {
				return
			}
			if d, err := parseRecord(r); err == nil && d.ID > above && c.watchAbove.CompareAndSwap(above, 0) {
				c.seen <- now
			}
		})
	}
	return nil
}

func (c *liveConsumer) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}

// watch arms the consumer: it reports the first record with an id above id.
func (c *liveConsumer) watch(id int64) {
	select {
	case <-c.seen:
	default:
	}
	c.watchAbove.Store(max(id, 1))
}
