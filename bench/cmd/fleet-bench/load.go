package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/bench/internal/host"
	"github.com/outboxd/outboxd/bench/internal/steady"
)

// loadRun is one measured steady run of A, the single pipeline, C or D.
type loadRun struct {
	System     string `json:"system"` // A, single, C or D
	Rep        int    `json:"rep"`
	Pipelines  int    `json:"pipelines"`
	Writers    int    `json:"writers"` // connections writing, over all databases
	TargetRate int    `json:"target_events_per_second"`
	steady.Result
	Reached   bool `json:"rate_reached"` // at least 95% of the target written
	Sustained bool `json:"sustained"`    // every event delivered, p99 under a second
	// CPU per event written, from the first write until the last event
	// arrived: outboxd's own processes (D: the Connect worker's JVM), and
	// the walsenders streaming their slots; MachineBusy is the share of
	// all cores busy meanwhile.
	PublisherCPUus float64 `json:"outboxd_cpu_us_per_event"`
	ServerCPUus    float64 `json:"walsender_cpu_us_per_event"`
	// PublisherWakeups is how often outboxd's threads woke up per
	// transaction written (procstat.Sleeps).
	PublisherWakeups float64 `json:"outboxd_wakeups_per_transaction"`
	MachineBusy      float64 `json:"machine_cpu_busy"`
	// PeakRSSBytes is outboxd's own peak resident set (VmHWM) at the end
	// of the run (D: the JVM's): for A, its start-up, idle window and load.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// CaughtUpSeconds is, for C and D, from launch until every walsender
	// of their slots decoded past a marker written once all streamed
	// (caughtUp).
	CaughtUpSeconds float64 `json:"launch_to_all_caught_up_seconds,omitempty"`
}

// warmUp is the unmeasured steady run before each measured one, as
// outboxd-bench warms each system up: connections, caches, the broker.
const warmUp = 5 * time.Second

// writers is how many connections write into each of n databases: 4 in
// all, as outboxd-bench writes one, or one each when there are more.
func writers(n int) int { return max(1, (4+n-1)/n) }

// load writes rate events/s spread evenly over the pipelines g runs
// (-transaction-size events a transaction): an unmeasured warm-up, then
// one measured run of -rate-duration.
func (b *bench) load(ctx context.Context, g *group, rep, rate int) (loadRun, error) {
	ps := g.ps
	l := steady.Load{Brokers: b.Kafka.Addr, Rate: rate, TxSize: b.o.txSize, Duration: warmUp}
	for _, p := range ps {
		l.Targets = append(l.Targets, steady.Target{URL: b.DatabaseURL(p.db), Topic: p.topic, Insert: p.insert, Writers: writers(len(ps))})
	}
	r := loadRun{System: g.name, Rep: rep, Pipelines: len(ps), Writers: len(ps) * writers(len(ps)), TargetRate: rate}
	var before, after host.Reading
	var readErr error
	// A reader is not a Kafka consumer: the load runs none, and each run
	// ends once the reader's walsenders sent everything written.
	received := func() {}
	if g.reader {
		l.Brokers = ""
		received = func() {
			if _, err := b.caughtUp(ctx, g); readErr == nil {
				readErr = err
			}
		}
		l.Ended = received
	}
	if _, err := steady.Run(ctx, l); err != nil || readErr != nil {
		return r, fmt.Errorf("%s: warming up: %w", g.name, errors.Join(err, readErr))
	}
	l.Duration = b.o.rateDuration
	l.Started = func() {
		if g.reader {
			readErr = restartCounts(g)
		}
		if rd, err := b.read(ctx, g); readErr == nil {
			before, readErr = rd, err
		}
	}
	l.Ended = func() {
		received()
		rd, err := b.read(ctx, g)
		if after = rd; readErr == nil {
			readErr = err
		}
	}
	res, err := steady.Run(ctx, l)
	if err == nil {
		err = readErr
	}
	if err == nil {
		err = g.exited()
	}
	if err != nil {
		return r, fmt.Errorf("%s: %w", g.name, err)
	}
	if r.PeakRSSBytes, err = g.peakRSS(); err != nil {
		return r, err
	}
	if g.reader {
		counts, err := readerCounts(g)
		if err != nil {
			return r, err
		}
		res.Delivered, res.P50ms, res.P95ms, res.P99ms, res.Maxms = counts.Inserts, counts.P50ms, 0, counts.P99ms, counts.Maxms
	}
	r.Result, r.Reached, r.Sustained = res, res.Reached(rate), res.Sustained()
	if res.Written > 0 {
		pub, srv, busy := host.Used(before, after)
		r.PublisherCPUus, r.ServerCPUus, r.MachineBusy = pub/float64(res.Written)*1e6, srv/float64(res.Written)*1e6, busy
		r.PublisherWakeups = float64(after.Sleeps-before.Sleeps) / (float64(res.Written) / float64(b.o.txSize))
	}
	return r, nil
}
