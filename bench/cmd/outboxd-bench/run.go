package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/bench/internal/host"
	"github.com/outboxd/outboxd/bench/internal/servers"
)

type options struct {
	outboxd, baseline, relay, testbed, debezium string
	events, reps, latencyReps, txSize           int
	systems, rates                              string
	rateDuration, readLinger                    time.Duration
	out                                         string
	args                                        []string // the command line's flags, for the report
	perf, steadyProfile                         bool
}

// env is the servers of the run.
type env struct {
	*servers.Servers
	o   options
	log *slog.Logger
	// registryURL is the schema registry of the format systems
	// (startRegistry); "" without one.
	registryURL string
}

// drainResult is one drain of one system.
type drainResult struct {
	System string `json:"system"`
	Rep    int    `json:"rep"`
	Events int    `json:"events"`
	// Seconds is the drain's time from the start of the system's stream
	// (its walsender acquiring the slot; the relay's first connection) to
	// its last record acknowledged (outboxd: the slot confirmed the
	// backlog's end; pg_recvlogical, which writes no records: its exit at
	// the backlog's end). StartupSeconds is from launching the system to
	// its stream's start (a JVM and Kafka Connect for Debezium), reported
	// apart. TimedFrom is "stream start", or "launch" where the stream was
	// not seen (then there is no start-up); runs recorded before it timed
	// the drain from the first record in Kafka (see drainTimedFromStream).
	Seconds        float64 `json:"seconds"`
	StartupSeconds float64 `json:"startup_seconds"`
	TimedFrom      string  `json:"timed_from,omitempty"`
	// FirstRecordSeconds is from the stream's start to the first record
	// in Kafka: how long the system held its first records back (0 for
	// pg_recvlogical).
	FirstRecordSeconds float64 `json:"first_record_seconds,omitempty"`
	EventsPerSec       float64 `json:"events_per_second"`
	PeakRSSBytes       int64   `json:"peak_rss_bytes"`
	CPUSeconds         float64 `json:"cpu_seconds"`
	InsertWALBytes     int64   `json:"insert_wal_bytes"` // WAL the backlog's inserts wrote
	DrainWALBytes      int64   `json:"drain_wal_bytes"`  // WAL written while draining (the relay's UPDATEs)
	DeadTuples         int64   `json:"dead_tuples"`      // left in the table after the drain (pgstattuple; autovacuum off)
	UpdatedRows        int64   `json:"updated_rows"`     // each update leaves a dead row version to prune or vacuum
	// TopicBytes is the size of the system's topic on the broker after the
	// drain: the record batches as sent, compressed or not (0 for
	// pg_recvlogical, which writes no records).
	TopicBytes int64 `json:"topic_bytes"`
	// WalsenderCPUSeconds is the CPU time of the slot's walsender (0 for
	// the relay); over Seconds it is how much of a core decoding took.
	WalsenderCPUSeconds float64 `json:"walsender_cpu_seconds"`
	// MachineBusy is the fraction of all cores' time that was busy.
	MachineBusy float64 `json:"machine_cpu_busy"`
	// WalsenderPerf is where the walsender's CPU went (perf, first
	// repetition only).
	WalsenderPerf string `json:"walsender_perf,omitempty"`
}

// Results is results.json.
type Results struct {
	Date       string                    `json:"date"`
	Args       []string                  `json:"args,omitempty"` // outboxd-bench's flags in this run
	Machine    map[string]string         `json:"machine"`
	Settings   map[string]string         `json:"settings"`
	Drains     []drainResult             `json:"drains"`
	Summary    map[string]summary        `json:"summary"`
	Latency    []latencyResult           `json:"latency"`
	LatencySum []latencySummary          `json:"latency_summary"`
	Micro      []string                  `json:"micro_benchmarks"`
	Profile    string                    `json:"outboxd_drain_profile_top"`
	Targets    map[string]string         `json:"targets"`
	Errors     map[string]string         `json:"errors,omitempty"`
	RatioToRef map[string]float64        `json:"drain_ratio_to_pg_recvlogical"`
	Extra      map[string]map[string]any `json:"extra,omitempty"`
	// WakeFloors is the machine's cost of one wake-up at each steady
	// rate's transaction rate: the floor under steady CPU per event.
	WakeFloors []wakeFloor `json:"wake_floors,omitempty"`
	// ProduceFloors is outboxd's producer alone at each steady rate: the
	// floor under outboxd's CPU per event and latency on this broker.
	ProduceFloors []produceFloor `json:"produce_floors,omitempty"`
}

// summary is the median drain of a system.
type summary struct {
	EventsPerSec       float64 `json:"events_per_second"`
	PeakRSSBytes       int64   `json:"peak_rss_bytes"`
	CPUSecondsPer100k  float64 `json:"cpu_seconds_per_100k_events"`
	InsertWALPerEvent  float64 `json:"insert_wal_bytes_per_event"`
	DrainWALPerEvent   float64 `json:"drain_wal_bytes_per_event"`
	DeadTuplesPerEvent float64 `json:"dead_tuples_per_event"`
	UpdatesPerEvent    float64 `json:"dead_row_versions_per_event"`
	TopicBytesPerEvent float64 `json:"topic_bytes_per_event"`
	WalsenderCores     float64 `json:"walsender_cores"`
	// WalsenderUsPerEvent is the walsender's CPU per event; 1e6 over it
	// is the drain rate of a walsender kept fully busy.
	WalsenderUsPerEvent float64 `json:"walsender_cpu_us_per_event"`
	StartupSeconds      float64 `json:"startup_seconds"`
	FirstRecordSeconds  float64 `json:"first_record_seconds,omitempty"`
	// TimedFromLaunch counts the repetitions whose stream was not seen,
	// timed from launch instead.
	TimedFromLaunch int     `json:"timed_from_launch,omitempty"`
	MachineBusy     float64 `json:"machine_cpu_busy"`
	Reps            int     `json:"reps"`
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	start := time.Now()
	srv, err := servers.Start(ctx, o.testbed)
	if err != nil {
		return err
	}
	defer srv.Remove(context.WithoutCancel(ctx)) //nolint:errcheck // the run's outcome is decided
	e := &env{Servers: srv, o: o, log: log}
	res := Results{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Args:    o.args,
		Machine: host.Describe(),
		Settings: map[string]string{"events": strconv.Itoa(o.events), "reps": strconv.Itoa(o.reps), "transaction_size": strconv.Itoa(o.txSize), "payload": "jsonb {\"n\": N, \"pad\": 200 x} (about 230 bytes with the key)", "partitions": strconv.Itoa(servers.Partitions),
			"drain_timed_from": streamStart,
			"postgres":         "15, fsync=on, full_page_writes=on, synchronous_commit=on (the backlog writer alone uses synchronous_commit=off)", "kafka": "4.1.1 single node KRaft, acks=all"},
		Summary: map[string]summary{}, Errors: map[string]string{}, RatioToRef: map[string]float64{},
	}
	if err := e.warmKafka(ctx, 1_000_000); err != nil {
		return err
	}
	systems := strings.Split(o.systems, ",")
	stopRegistry, err := e.startRegistry(ctx, systems)
	if err != nil {
		return err
	}
	defer stopRegistry()
	if slices.Contains(systems, "outboxd-linger") {
		res.Settings["read_linger"] = o.readLinger.String() + " (outboxd-linger's --read-linger)"
	}
	if slices.Contains(systems, "outboxd") {
		// An untimed, profiled outboxd drain first. It also warms the
		// broker up for small produce requests: whichever system first sent
		// those was measured against a cold JIT (outboxd's first timed drain
		// was markedly slower than those after it, profiled or not).
		log.Info("drain", "system", "outboxd", "untimed", true, "profiled", true)
		if _, prof, err := e.drain(ctx, "outboxd", -1, true); err != nil {
			res.Profile = "profiled drain: " + err.Error()
		} else {
			res.Profile = prof
		}
	}
	for rep := range o.reps {
		for _, sys := range systems {
			if _, failed := res.Errors[sys]; failed {
				continue
			}
			log.Info("drain", "system", sys, "rep", rep+1, "of", o.reps)
			d, _, err := e.drain(ctx, sys, rep, false)
			if err != nil {
				log.Error("drain failed", "system", sys, "err", err)
				res.Errors[sys] = err.Error()
				continue
			}
			log.Info("drained", "system", sys, "events_per_second", int(d.EventsPerSec), "timed_from", d.TimedFrom, "startup_s", d.StartupSeconds, "peak_rss_mib", d.PeakRSSBytes>>20, "cpu_s", d.CPUSeconds)
			res.Drains = append(res.Drains, d)
		}
	}
	for _, sys := range systems {
		res.Summary[sys] = summarize(res.Drains, sys)
	}
	if ref := res.Summary["pg_recvlogical"].EventsPerSec; ref > 0 {
		for sys, s := range res.Summary {
			res.RatioToRef[sys] = s.EventsPerSec / ref
		}
	}
	for _, group := range latencyGroups(systems) {
		if o.rates == "" || slices.ContainsFunc(group, func(sys string) bool { _, failed := res.Errors[sys]; return failed }) {
			continue
		}
		lat, err := e.latency(ctx, group...)
		if err != nil {
			log.Error("latency runs failed", "systems", group, "err", err)
			res.Errors[strings.Join(group, "+")+" latency"] = err.Error()
		}
		res.Latency = append(res.Latency, lat...)
	}
	if rates, err := parseRates(o.rates); err == nil {
		rates = floorRates(rates)
		floors, err := measureWakeFloors(ctx, rates, o.txSize)
		if err != nil {
			res.Errors["wake floor"] = err.Error()
		}
		res.WakeFloors = floors
		if slices.ContainsFunc(systems, isOutboxd) {
			pf, err := e.measureProduceFloors(ctx, rates, o.latencyReps)
			if err != nil {
				res.Errors["producer floor"] = err.Error()
			}
			res.ProduceFloors = pf
		}
	}
	res.Micro = microBenchmarks(ctx)
	res.Settings["total_seconds"] = fmt.Sprintf("%.0f", time.Since(start).Seconds())
	return write(o.out, res)
}

// latencyGroups are the systems' steady-rate runs in order: outboxd and
// what it is compared with (outboxd-baseline, an earlier build;
// outboxd-linger, outboxd with --read-linger; the format systems) as one
// group, whose runs
// interleave, every other system alone. pg_recvlogical has none.
func latencyGroups(systems []string) [][]string {
	var groups [][]string
	var compared []string
	if slices.Contains(systems, "outboxd") {
		for _, sys := range append([]string{"outboxd-baseline", "outboxd-linger"}, formatSystems...) {
			if slices.Contains(systems, sys) {
				compared = append(compared, sys)
			}
		}
	}
	for _, sys := range systems {
		switch {
		case sys == "pg_recvlogical" || slices.Contains(compared, sys):
		case sys == "outboxd" && len(compared) > 0:
			groups = append(groups, append([]string{"outboxd"}, compared...))
		default:
			groups = append(groups, []string{sys})
		}
	}
	return groups
}

func summarize(all []drainResult, sys string) summary {
	var ds []drainResult
	for _, d := range all {
		if d.System == sys {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return summary{}
	}
	slices.SortFunc(ds, func(a, b drainResult) int { return int(a.EventsPerSec - b.EventsPerSec) })
	m := ds[len(ds)/2]
	fromLaunch := 0
	for _, d := range ds {
		if d.TimedFrom == "launch" {
			fromLaunch++
		}
	}
	ev := float64(m.Events)
	return summary{
		EventsPerSec: m.EventsPerSec, PeakRSSBytes: m.PeakRSSBytes, CPUSecondsPer100k: m.CPUSeconds / ev * 100000,
		InsertWALPerEvent: float64(m.InsertWALBytes) / ev, DrainWALPerEvent: float64(m.DrainWALBytes) / ev,
		DeadTuplesPerEvent: float64(m.DeadTuples) / ev, UpdatesPerEvent: float64(m.UpdatedRows) / ev, TopicBytesPerEvent: float64(m.TopicBytes) / ev,
		WalsenderCores: m.WalsenderCPUSeconds / m.Seconds, WalsenderUsPerEvent: m.WalsenderCPUSeconds / ev * 1e6,
		StartupSeconds: m.StartupSeconds, FirstRecordSeconds: m.FirstRecordSeconds, MachineBusy: m.MachineBusy, Reps: len(ds),
		TimedFromLaunch: fromLaunch,
	}
}

func (e *env) lsn(ctx context.Context, db string) (int64, error) {
	conn, err := pgx.Connect(ctx, e.DatabaseURL(db))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var v int64
	err = conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&v)
	return v, err
}

// warmWAL reads every WAL segment so the drain does not pay for disk reads
// that an earlier system already paid for.
func (e *env) warmWAL() {
	files, _ := filepath.Glob(filepath.Join(e.PG.Dir, "data", "pg_wal", "0*"))
	buf := make([]byte, 1<<20)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		for {
			if _, err := fh.Read(buf); err != nil {
				break
			}
		}
		fh.Close()
	}
}

var errSkipped = errors.New("skipped")
