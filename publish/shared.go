package publish

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Pool shares at-least-once Kafka clients among the pipelines of one
// process: the Producers it hands out for one key publish through one
// franz-go client, so that one produce request to a broker carries the
// records of every pipeline that had some waiting, and a fleet of
// pipelines holds one client's connections and buffers instead of one
// each. The client closes when its last Producer closes. Safe for
// concurrent use.
//
// What sharing changes for a Producer: Abort waits for its records
// instead of failing them (see Producer.Abort), DataLossEvents and the
// Reachability count the whole client's, and the client's settings are
// those of the key's first Producer.
type Pool struct {
	log *slog.Logger
	// abortWait bounds how long a Producer's Abort waits for its records
	// (sharedAbortWait).
	abortWait time.Duration

	mu      sync.Mutex
	clients map[string]*sharedClient
}

// NewPool returns an empty Pool.
func NewPool(log *slog.Logger) *Pool {
	return &Pool{log: log, abortWait: sharedAbortWait, clients: map[string]*sharedClient{}}
}

// sharedClient is one client of a Pool and its users.
type sharedClient struct {
	cl       *kgo.Client
	reach    *Reachability
	dataLoss *dataLossCounter
	max      int // cfg.MaxRecordBytes
	refs     int
}

// Producer returns a Producer publishing through the pool's client for
// key, which it creates from cfg when there is none, and the
// Reachability of that client. key must stand for every setting of cfg,
// Opts included (TLS, SASL): Producers of one key share the first one's.
func (p *Pool) Producer(key string, cfg Config) (*Producer, *Reachability, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.clients[key]
	if c == nil {
		cfg = cfg.WithDefaults()
		c = &sharedClient{reach: NewReachability(cfg.Brokers, p.log), dataLoss: &dataLossCounter{log: p.log}, max: cfg.MaxRecordBytes}
		cfg.Opts = append(append([]kgo.Opt(nil), cfg.Opts...), c.reach.Hooks())
		cl, err := kgo.NewClient(clientOpts(cfg, p.log, c.dataLoss.detected)...)
		if err != nil {
			return nil, nil, fmt.Errorf("creating Kafka producer: %w", err)
		}
		c.cl = cl
		p.clients[key] = c
	}
	c.refs++
	s := &share{pool: p, key: key, c: c}
	return &Producer{cl: c.cl, maxRecordBytes: c.max, dataLoss: c.dataLoss, share: s}, c.reach, nil
}

// Clients is how many clients the pool holds open.
func (p *Pool) Clients() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.clients)
}

// share is one Producer's part of a shared client: its records in
// flight, so that it can wait for them, and whether it let go.
type share struct {
	pool *Pool
	key  string
	c    *sharedClient

	mu       sync.Mutex
	inFlight int
	closed   bool
}

// track counts a record handed to the client until done is called for
// it; once the Producer closed, its records are not reported.
func (s *share) track(done func(error)) func(error) {
	s.mu.Lock()
	s.inFlight++
	s.mu.Unlock()
	return func(err error) {
		s.mu.Lock()
		s.inFlight--
		closed := s.closed
		s.mu.Unlock()
		if !closed {
			done(err)
		}
	}
}

// waitPoll is how often wait looks at the records in flight: an Abort
// follows a failure that stops the pipeline, so it is rare.
const waitPoll = 5 * time.Millisecond

// sharedAbortWait bounds a shared Producer's Abort: its records wait for
// ever while a partition has no leader, and the pipeline that failed must
// get to its restart (its records left in the client are written, or
// fail, later, unreported: Close).
const sharedAbortWait = 10 * time.Second

// wait returns once none of the Producer's records is in flight, or an
// error once ctx ended or the pool's abortWait passed.
func (s *share) wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.pool.abortWait)
	defer cancel()
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := s.inFlight
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d records on the shared Kafka client: %w", n, ctx.Err())
		case <-t.C:
		}
	}
}

// release lets go of the client; the last Producer closes it.
func (s *share) release() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	p := s.pool
	p.mu.Lock()
	s.c.refs--
	last := s.c.refs == 0
	if last && p.clients[s.key] == s.c {
		delete(p.clients, s.key)
	}
	p.mu.Unlock()
	if last {
		s.c.cl.Close()
	}
}
