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

	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/slot"
)

// The states a Member reports besides its pipeline's (pipeline.State:
// starting, streaming, standby, reconnecting).
const (
	StateWaiting    pipeline.State = "waiting"     // before trying the pipeline: its rank's delay, or a hand-over
	StateBackingOff pipeline.State = "backing off" // the pipeline failed; it starts again after a backoff
	StateStopped                   = pipeline.StateStopped
)

// States lists every state a Member reports: its pipeline's and its own.
func States() []pipeline.State { return append(pipeline.States(), StateWaiting, StateBackingOff) }

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
	obs      pipeline.Observer
	cur      *pipeline.Pipeline
	state    pipeline.State // "" while cur runs: its own state stands
	detail   string
	failures uint64
	panics   uint64
	lastErr  string
	stopped  bool               // stop was called
	stopRun  context.CancelFunc // run's own, set while run runs
}

func newMember(spec Spec, cfg Config, log *slog.Logger) *Member {
	rank := Rank(spec.Name, cfg.Replica, cfg.Replicas)
	if !cfg.Single { // a Single fleet's pipeline is the process's
		log = log.With("pipeline", spec.Name)
	}
	return &Member{spec: spec, rank: rank, cfg: cfg, log: log, gone: make(chan struct{}), state: StateWaiting}
}

// Name is the pipeline's name.
func (m *Member) Name() string { return m.spec.Name }

// Rank is this replica's rank for the pipeline (0: preferred).
func (m *Member) Rank() int { return m.rank }

// Observe sets the observer of the records of every pipeline the Member
// runs from now on (metrics).
func (m *Member) Observe(o pipeline.Observer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.obs = o
}

// Status is the status of the pipeline the Member runs, or ran last (zero
// counts before the first start), with the Member's own word: its state
// while the pipeline does not run (waiting, backing off, stopped) and
// why, and the failures it restarted the pipeline after.
func (m *Member) Status() pipeline.Status {
	m.mu.Lock()
	p := m.cur
	st := pipeline.Status{State: m.state, Detail: m.detail, PermanentErrors: m.failures, Panics: m.panics, LastError: m.lastErr}
	m.mu.Unlock()
	if p == nil {
		st.RetainedWAL = -1
		return st
	}
	ps := p.Status()
	ps.PermanentErrors, ps.Panics, ps.LastError = st.PermanentErrors, st.Panics, st.LastError
	if st.State != "" {
		ps.State, ps.Detail = st.State, st.Detail
	}
	return ps
}

// current is the pipeline the Member runs or ran last; nil before the first.
func (m *Member) current() *pipeline.Pipeline {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// Ping checks that Kafka answers the pipeline's client.
func (m *Member) Ping(ctx context.Context) error {
	p := m.current()
	if p == nil {
		return fmt.Errorf("pipeline %s has not started", m.spec.Name)
	}
	return p.Ping(ctx)
}

func (m *Member) setState(state pipeline.State, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state, m.detail = state, detail
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
// again after each failure, or, in a Single fleet, returning the first
// failure. It returns once the last run drained.
func (m *Member) run(ctx context.Context) error {
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
			return nil
		}
		started := time.Now()
		yielded, err := m.runOnce(ctx)
		switch {
		case err != nil && m.cfg.Single:
			m.recordFailure(err)
			return err
		case ctx.Err() != nil:
			return nil
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
		pe := m.recordFailure(err)
		m.setState(StateBackingOff, fmt.Sprintf("%s (starting again at %s)", summary(err), time.Now().Add(wait).UTC().Format(time.RFC3339)))
		if pe != nil {
			m.log.Error("pipeline panicked (a bug in outboxd: please report it with this stack); the other pipelines go on, and this one starts again after a backoff, "+
				"nothing confirmed past what Kafka acknowledged", "err", err, "retry_in", wait, "stack", string(pe.Stack))
			continue
		}
		m.log.Error("pipeline stopped; the other pipelines go on, and this one starts again after a backoff", "err", err, "retry_in", wait)
	}
}

// recordFailure counts the pipeline's failure err, and returns it as a
// panic when it was one.
func (m *Member) recordFailure(err error) *contain.PanicError {
	var pe *contain.PanicError
	panicked := errors.As(err, &pe)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures++
	if panicked {
		m.panics++
	}
	m.lastErr = err.Error()
	return pe
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
	return handover{slot: streamSlot(cfg), url: handoverURL(cfg), name: m.appName(), replica: m.cfg.Replica, every: m.cfg.RankDelay, log: m.log}
}

// handoverURL is where the replicas of a pipeline record and notify their
// hand-overs: its database, or the primary's when the slot is decoded on
// a standby, which can neither write nor LISTEN and NOTIFY.
func handoverURL(cfg pipeline.Config) string {
	if cfg.Stream.PrimaryURL != "" {
		return cfg.Stream.PrimaryURL
	}
	return cfg.Stream.DatabaseURL
}

// appName names the pipeline's connections: its name (none in a Single
// fleet, which runs no pipelines file), this replica's number when there
// are several, its settings' fingerprint.
func (m *Member) appName() string {
	n := slot.AppName{Replica: -1, Settings: m.spec.Settings}
	if !m.cfg.Single {
		n.Pipeline = m.spec.Name
	}
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
	m.mu.Lock()
	cfg.Observer = m.obs
	m.mu.Unlock()
	p, err := pipeline.New(cfg, m.log)
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	m.cur, m.state, m.detail = p, "", ""
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
	defer context.AfterFunc(pctx, func() { held.Store(p.Status().State == pipeline.StateStreaming) })()
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
