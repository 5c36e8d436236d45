package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/slot"
)

// The states a Member reports besides its stream's (cdc.State: starting,
// streaming, standby, reconnecting).
const (
	StateWaiting    = "waiting"     // before trying the pipeline: its rank's delay, or a hand-over
	StateBackingOff = "backing off" // the pipeline failed; it starts again after a backoff
	StateStopped    = "stopped"     // not running: the fleet stopped or removed it
)

// Status is what a Member is doing.
type Status struct {
	Name  string
	Rank  int    // this replica's rank for the pipeline (0: preferred)
	State string // a cdc.State's text while the pipeline runs, else one of the State constants
	// Detail says why, when there is something to say: the error the
	// pipeline failed with and when it starts again, what it waits for.
	Detail string
	Since  time.Time // when State was entered (for the states of this package)
	// Failures counts the times the pipeline failed and was started again,
	// Panics those of them that were a panic (a bug); LastError is the last
	// failure's error, kept after the restart.
	Failures, Panics int
	LastError        string
}

// Member runs one pipeline of a fleet for as long as the fleet keeps it:
// it starts it after its rank's delay, starts it again after a failure,
// and hands it over to the replica ranked first for it when asked. Its
// methods report on the pipeline it currently runs (the last one after a
// failure), for metrics and health checks.
type Member struct {
	spec Spec
	rank int
	cfg  Config
	log  *slog.Logger
	gone chan struct{} // closed when the fleet let go of it (after Hooks.Removed)

	mu       sync.Mutex
	obs      pump.Observer
	cur      *pipeline.Pipeline
	state    string // "" while cur runs: its stream's state
	detail   string
	since    time.Time
	failures int
	panics   int
	lastErr  string
	stopped  bool               // stop was called
	stopRun  context.CancelFunc // run's own, set while run runs
}

func newMember(spec Spec, cfg Config, log *slog.Logger) *Member {
	rank := Rank(spec.Name, cfg.Replica, cfg.Replicas)
	return &Member{spec: spec, rank: rank, cfg: cfg, log: log.With("pipeline", spec.Name),
		gone: make(chan struct{}), state: StateWaiting, since: time.Now()}
}

// Name is the pipeline's name.
func (m *Member) Name() string { return m.spec.Name }

// Observe sets the observer of the records of every pipeline the Member
// runs from now on (metrics).
func (m *Member) Observe(o pump.Observer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.obs = o
}

// Status says what the Member is doing.
func (m *Member) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Name: m.spec.Name, Rank: m.rank, State: m.state, Detail: m.detail, Since: m.since, Failures: m.failures, Panics: m.panics, LastError: m.lastErr}
	if st.State == "" && m.cur != nil {
		st.State = m.cur.Stream().Stats().State.String()
	}
	return st
}

// Stats are the statistics of the pipeline's stream (zero before the
// first start), with State StateStopped while none runs.
func (m *Member) Stats() cdc.Stats {
	m.mu.Lock()
	p, running := m.cur, m.state == ""
	m.mu.Unlock()
	if p == nil {
		return cdc.Stats{State: cdc.StateStopped}
	}
	s := p.Stream().Stats()
	if !running {
		s.State = cdc.StateStopped
	}
	return s
}

// current is the pipeline the Member runs or ran last; nil before the first.
func (m *Member) current() *pipeline.Pipeline {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// Retained is the WAL the pipeline's slot retains, -1 when unknown.
func (m *Member) Retained() int64 {
	if p := m.current(); p != nil {
		return p.Monitor().Retained()
	}
	return -1
}

// Ping checks that Kafka answers the pipeline's client.
func (m *Member) Ping(ctx context.Context) error {
	p := m.current()
	if p == nil {
		return fmt.Errorf("pipeline %s has not started", m.spec.Name)
	}
	return p.Ping(ctx)
}

// ConnectionErrors counts the pipeline's failed dials and requests to Kafka.
func (m *Member) ConnectionErrors() uint64 {
	if p := m.current(); p != nil {
		return p.Reach().ConnectionErrors()
	}
	return 0
}

// UnreachableSince is since when Kafka has not answered the pipeline's
// client; zero while it answers.
func (m *Member) UnreachableSince() time.Time {
	if p := m.current(); p != nil {
		return p.Reach().UnreachableSince()
	}
	return time.Time{}
}

// Counts are the running totals of the pipeline the Member runs: each
// func reads the current one, 0 before the first start.
func (m *Member) Counts() pipeline.Counts {
	read := func(f func(pipeline.Counts) func() uint64) func() uint64 {
		return func() uint64 {
			if p := m.current(); p != nil {
				if g := f(p.Counts()); g != nil {
					return g()
				}
			}
			return 0
		}
	}
	return pipeline.Counts{
		DataLoss:          read(func(c pipeline.Counts) func() uint64 { return c.DataLoss }),
		Heartbeats:        read(func(c pipeline.Counts) func() uint64 { return c.Heartbeats }),
		KafkaTransactions: read(func(c pipeline.Counts) func() uint64 { return c.KafkaTransactions }),
		SkippedRecords:    read(func(c pipeline.Counts) func() uint64 { return c.SkippedRecords }),
	}
}

// Panics counts the times the pipeline panicked and was started again.
func (m *Member) Panics() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return uint64(m.panics)
}

func (m *Member) setState(state, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state, m.detail, m.since = state, detail, time.Now()
}

// stop asks run to stop the pipeline gracefully and return, or not to
// start; it does not wait.
func (m *Member) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if m.stopRun != nil {
		m.stopRun()
	}
}

// delay is how long this replica waits, by its rank, before it first
// tries the pipeline or takes its released slot.
func (m *Member) delay() time.Duration { return time.Duration(m.rank) * m.cfg.RankDelay }

// run runs the pipeline until ctx ends or stop is called, starting it
// again after each failure. It returns once the last run drained.
func (m *Member) run(ctx context.Context) {
	defer m.setState(StateStopped, "")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.mu.Lock()
	m.stopRun = cancel
	if m.stopped {
		cancel()
	}
	m.mu.Unlock()
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(m.cfg.RetryInitial), backoff.WithMaxInterval(m.cfg.RetryMax),
		backoff.WithMaxElapsedTime(0))
	wait := m.delay()
	if wait > 0 {
		m.log.Info("waiting before trying the pipeline: a replica ranked before this one takes it first", "rank", m.rank, "wait", wait)
	}
	for {
		if wait > 0 && !m.waitRanked(ctx, wait) {
			return
		}
		started := time.Now()
		yielded, err := m.runOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case yielded:
			m.setState(StateWaiting, "handed over to the replica ranked first for it")
			wait = max(m.delay(), m.cfg.RankDelay)
			bo.Reset()
			continue
		}
		if time.Since(started) > m.cfg.RetryMax {
			bo.Reset() // it ran a while: a new failure, not the same one again
		}
		wait = bo.NextBackOff()
		var pe *contain.PanicError
		panicked := errors.As(err, &pe)
		m.mu.Lock()
		m.failures++
		if panicked {
			m.panics++
		}
		m.lastErr = err.Error()
		m.mu.Unlock()
		m.setState(StateBackingOff, fmt.Sprintf("%s (starting again at %s)", summary(err), time.Now().Add(wait).UTC().Format(time.RFC3339)))
		if panicked {
			m.log.Error("pipeline panicked (a bug in outboxd: please report it with this stack); the other pipelines go on, and this one starts again after a backoff, "+
				"nothing confirmed past what Kafka acknowledged", "err", err, "retry_in", wait, "stack", string(pe.Stack))
			continue
		}
		m.log.Error("pipeline stopped; the other pipelines go on, and this one starts again after a backoff", "err", err, "retry_in", wait)
	}
}

// waitRanked waits d before this replica tries the pipeline, or less when
// the replica holding its slot let it go for this one; false when ctx
// ended first.
func (m *Member) waitRanked(ctx context.Context, d time.Duration) bool {
	if m.cfg.Replicas <= 1 {
		return sleep(ctx, d)
	}
	return m.handover().awaitRelease(ctx, d)
}

func (m *Member) handover() handover {
	cfg := m.spec.Config
	return handover{slot: streamSlot(cfg), url: cfg.Stream.DatabaseURL, name: m.appName(), replica: m.cfg.Replica, every: m.cfg.RankDelay, log: m.log}
}

// appName names the pipeline's connections: its name, this replica's
// number when there are several, its settings' fingerprint.
func (m *Member) appName() string {
	n := slot.AppName{Pipeline: m.spec.Name, Replica: -1, Settings: m.spec.Settings}
	if m.cfg.Replicas > 1 {
		n.Replica = m.cfg.Replica
	}
	return n.String()
}

// runOnce builds the pipeline and runs it until ctx ends (nil), it fails
// (its error), or it was handed over (yielded).
func (m *Member) runOnce(ctx context.Context) (yielded bool, err error) {
	// The pipeline's goroutines return their panics as errors (package
	// contain); this one's own code, building it, does here.
	defer func() {
		if v := recover(); v != nil {
			err = contain.Recovered("running pipeline "+m.spec.Name, v)
		}
	}()
	cfg := m.spec.Config
	cfg.Stream.TakeoverDelay = m.delay()
	cfg.Stream.ApplicationName = m.appName()
	p, err := pipeline.New(cfg, m.log)
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	if m.obs != nil {
		p.Observe(m.obs)
	}
	m.cur, m.state, m.detail, m.since = p, "", "", time.Now()
	m.mu.Unlock()

	pctx, stopPipeline := context.WithCancel(ctx)
	defer stopPipeline()
	g, gctx := errgroup.WithContext(ctx)
	// The hand-over side lasts as long as the pipeline runs.
	hctx, stopHandover := context.WithCancel(gctx)
	defer stopHandover()
	// Whether this replica held the slot when its pipeline was told to
	// stop: a graceful stop then lets it go for the replica ranked next.
	var held atomic.Bool
	defer context.AfterFunc(pctx, func() { held.Store(p.Stream().Stats().State == cdc.StateStreaming) })()
	g.Go(func() error {
		defer stopHandover()
		return contain.Call("running pipeline "+m.spec.Name, func() error { return p.Run(pctx) })
	})
	var h handover
	if m.cfg.Replicas > 1 {
		h = m.handover()
		if m.rank == 0 {
			g.Go(func() error {
				return contain.Call("claiming pipeline "+m.spec.Name, func() error { h.claim(hctx, p); return nil })
			})
		}
		g.Go(func() error {
			return contain.Call("handing pipeline "+m.spec.Name+" over", func() error {
				if h.listen(hctx, p) {
					m.log.Info("the replica ranked first for the pipeline stands by: handing it over (drain, confirm, release the slot)", "rank", m.rank)
					yielded = true
					stopPipeline()
				}
				return nil
			})
		})
	}
	err = g.Wait()
	if m.cfg.Replicas > 1 && err == nil && held.Load() {
		if to := m.nextRanked(); to >= 0 {
			h.release(ctx, to)
		}
	}
	return yielded, err
}

// nextRanked is the replica ranked first for the pipeline among the others
// (-1 with none).
func (m *Member) nextRanked() int {
	best, bestRank := -1, 0
	for r := range m.cfg.Replicas {
		if r == m.cfg.Replica {
			continue
		}
		if rank := Rank(m.spec.Name, r, m.cfg.Replicas); best < 0 || rank < bestRank {
			best, bestRank = r, rank
		}
	}
	return best
}

func streamSlot(c pipeline.Config) string { return c.Stream.WithDefaults().Slot }

// maxDetail bounds a failure's text in a Status's Detail.
const maxDetail = 300

// summary is err as Status.Detail says it (on /pipelines, unauthenticated):
// a row's error without its text, which can quote the row's values (the
// Error log has it whole), and any other cut at maxDetail bytes.
func summary(err error) string {
	var re *outbox.RowError
	if errors.As(err, &re) {
		what := "a row of " + re.Table
		if re.ID != "" {
			what += " (outbox id " + re.ID + ")"
		}
		if re.Column != "" {
			what += ", column " + strconv.Quote(re.Column)
		}
		return what + " cannot be published; the Error log says why"
	}
	msg := err.Error()
	if len(msg) <= maxDetail {
		return msg
	}
	cut := maxDetail
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "… (the Error log has it whole)"
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Supervised is the Member's own state while its pipeline does not run
// (StateWaiting, StateBackingOff) and why; state is "" while the pipeline
// runs (its stream's state stands) and once the Member stopped (the
// stream's stopped stands).
func (m *Member) Supervised() (state, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == "" || m.state == StateStopped {
		return "", ""
	}
	return m.state, m.detail
}

// States lists the states Supervised returns.
func (m *Member) States() []string { return []string{StateWaiting, StateBackingOff} }
