package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/registry/srclient"
)

// Stage encodes records' values and keys per their registered schemas on
// their way from the stream to the pump. Build it with New, run its
// fetcher with Run beside the stream, and give it to the stream as its
// consumer.
type Stage struct {
	cfg   Config
	next  outbox.Stage
	log   *slog.Logger
	cl    *sr.Client
	reqs  chan *fetch
	clock func() time.Time

	mu      sync.Mutex
	cache   map[subjectKey]*entry
	pending map[subjectKey]*fetch
	// refetched is the position of the last record whose misfit made the
	// stage look its subject's latest schema up again: a record offered
	// again (the pump had no room) does not ask again.
	refetched map[subjectKey]outbox.Position
	// missing are the subjects the registry said it does not know, and
	// when: asked again only a refresh interval later, not for every
	// record of a topic that names one.
	missing map[subjectKey]missingSubject

	encoded, refused atomic.Uint64
}

// subjectKey is one side of a subject's records.
type subjectKey struct {
	subject string
	key     bool // the record's key, else its value
}

// missingSubject is the registry's word that a subject does not exist.
type missingSubject struct {
	at  time.Time
	err *SubjectMissingError
}

// entry is a schema in use.
type entry struct {
	id, version int
	codec       *format.Codec
	fetched     time.Time
}

// fetch is one request to the fetcher: done closes once e or err is set.
type fetch struct {
	k     subjectKey
	side  Side
	retry bool // until it succeeds or the stage stops; else one attempt (a refresh)
	done  chan struct{}
	e     *entry
	err   error
}

// New builds a Stage that hands records on to next. It does no I/O.
func New(cfg Config, next outbox.Stage, log *slog.Logger) (*Stage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	cl, err := srclient.New(cfg.URLs, cfg.Username, cfg.Password, cfg.TLS, cfg.RequestTimeout, "outboxd")
	if err != nil {
		return nil, err
	}
	return &Stage{cfg: cfg, next: next, log: log, cl: cl, reqs: make(chan *fetch, 16), clock: time.Now,
		cache: map[subjectKey]*entry{}, pending: map[subjectKey]*fetch{}, refetched: map[subjectKey]outbox.Position{}, missing: map[subjectKey]missingSubject{}}, nil
}

// Stats are the stage's running totals.
type Stats struct {
	Encoded uint64 // records handed on encoded
	Refused uint64 // records refused: their payload or key did not fit
}

// Stats returns the stage's running totals.
func (s *Stage) Stats() Stats { return Stats{Encoded: s.encoded.Load(), Refused: s.refused.Load()} }

// Apply encodes an event's value and key and hands the change on; other
// changes go on as they are. An event that does not fit its schema goes
// on as a *outbox.RowError (next.Reject). While the registry does not
// answer it waits; when ctx ends meanwhile it returns ctx's error having
// taken nothing. Any other error is permanent.
func (s *Stage) Apply(ctx context.Context, c outbox.Change) error {
	if c.Kind != outbox.ChangeEvent {
		return s.next.Apply(ctx, c)
	}
	ev := c.Event
	for _, side := range []struct {
		key  bool
		cfg  Side
		data *[]byte
	}{{false, s.cfg.Value, &ev.Value}, {true, s.cfg.Key, &ev.Key}} {
		if side.cfg.Format == format.JSON || *side.data == nil {
			continue // a null value (a tombstone) or key stays null, as the registry's serializers leave it
		}
		out, misfitErr, err := s.encode(ctx, &c.Event, side.key, side.cfg, *side.data)
		if err != nil {
			return err
		}
		if misfitErr != nil {
			if err := s.next.Reject(ctx, misfitErr); err != nil {
				return err
			}
			s.refused.Add(1)
			return nil
		}
		*side.data = out
	}
	c.Event = ev
	if err := s.next.Apply(ctx, c); err != nil {
		return err
	}
	s.encoded.Add(1)
	return nil
}

// encode encodes one side of ev: the record bytes, or the RowError that
// refuses ev, or an error of the registry or ctx.
func (s *Stage) encode(ctx context.Context, ev *outbox.Event, key bool, side Side, data []byte) ([]byte, *outbox.RowError, error) {
	k := subjectKey{subject: s.subject(ev.Topic, key, side), key: key}
	e, err := s.schema(ctx, k, side)
	var missing *SubjectMissingError
	switch {
	case errors.As(err, &missing) && s.cfg.SubjectStrategy != RecordName:
		// The record's topic names a subject the registry does not know.
		return nil, s.missingError(ev, key, missing), nil
	case err != nil:
		return nil, nil, err
	}
	out, encErr := e.codec.Append(nil, e.id, data)
	if encErr != nil && s.latest(side) && s.refetched[k] != ev.Position() {
		// A new version may have been registered since: look again before
		// refusing the record.
		if e, err = s.refetch(ctx, k, side, ev.Position()); err != nil {
			return nil, nil, err
		}
		out, encErr = e.codec.Append(nil, e.id, data)
	}
	if encErr != nil {
		return nil, s.rowError(ev, k, e, encErr), nil
	}
	return out, nil, nil
}

// latest reports whether side follows its subject's latest schema.
func (s *Stage) latest(side Side) bool {
	return !s.cfg.AutoRegister && side.Version == 0 && side.ID == 0
}

// rowError refuses ev, whose side k does not fit schema e: the raw
// record, and why.
func (s *Stage) rowError(ev *outbox.Event, k subjectKey, e *entry, err error) *outbox.RowError {
	return refused(ev, fmt.Errorf("the record's %s does not fit the %s schema of subject %q (version %d, id %d): %w",
		sideName(k.key), e.codec.Format(), k.subject, e.version, e.id, err))
}

// missingError refuses ev, whose topic names a subject the registry does
// not know: the raw record, and why.
func (s *Stage) missingError(ev *outbox.Event, key bool, err *SubjectMissingError) *outbox.RowError {
	return refused(ev, fmt.Errorf("the record's %s has no schema: its topic %q names %s, which the schema registry does not know (%s); "+
		"register the schema, or fix the row's topic", sideName(key), ev.Topic, err.What, err.Message))
}

// refused is ev refused for err, as a row error: the raw record, with its
// place in the stream and its source.
func refused(ev *outbox.Event, err error) *outbox.RowError {
	var source string
	for _, h := range ev.Headers {
		if h.Key == outbox.SourceHeader {
			source = string(h.Value)
			break
		}
	}
	return &outbox.RowError{Table: ev.Table, ID: ev.ID(), Source: source, Err: err,
		Topic: ev.Topic, Key: ev.Key, Value: ev.Value, CommitTime: ev.CommitTime, CommitLSN: ev.CommitLSN, Index: ev.Index}
}

func sideName(key bool) string {
	if key {
		return "key"
	}
	return "value"
}

// subject is the subject of one side of a record on topic.
func (s *Stage) subject(topic string, key bool, side Side) string {
	switch s.cfg.SubjectStrategy {
	case RecordName:
		return side.Record
	case TopicRecordName:
		return topic + "-" + side.Record
	}
	if key {
		return topic + "-key"
	}
	return topic + "-value"
}

// schema returns the schema in use for k, fetching it when there is none
// yet, and asking for a refresh of a latest one that is due.
func (s *Stage) schema(ctx context.Context, k subjectKey, side Side) (*entry, error) {
	s.mu.Lock()
	e := s.cache[k]
	f := s.pending[k]
	m, known := s.missing[k]
	s.mu.Unlock()
	if known && e == nil && f == nil && s.clock().Sub(m.at) < s.cfg.RefreshInterval {
		return nil, m.err
	}
	if f != nil {
		if e == nil || f.retry {
			return s.wait(ctx, f, e)
		}
		// A refresh: its answer when it has one, else the cached schema.
		select {
		case <-f.done:
			s.settle(f)
			if f.e != nil {
				return f.e, nil
			}
		default:
		}
		return e, nil
	}
	if e == nil {
		return s.ask(ctx, k, side, true, e)
	}
	if s.latest(side) && s.clock().Sub(e.fetched) >= s.cfg.RefreshInterval {
		// One attempt beside the stream; the cached schema serves meanwhile.
		if _, err := s.ask(ctx, k, side, false, e); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// refetch looks k's latest schema up again, for the record at pos.
func (s *Stage) refetch(ctx context.Context, k subjectKey, side Side, pos outbox.Position) (*entry, error) {
	s.mu.Lock()
	f := s.pending[k]
	s.mu.Unlock()
	if f == nil || !f.retry {
		var err error
		if f, err = s.send(ctx, k, side, true); err != nil {
			return nil, err
		}
	}
	// Noted before waiting: when ctx ends first and the record is offered
	// again, it waits for this fetch (pending) rather than ask again.
	s.refetched[k] = pos
	return s.wait(ctx, f, nil)
}

// ask sends a fetch of k and, when it retries until it succeeds, waits
// for it; a refresh (retry false) returns the cached schema at once.
func (s *Stage) ask(ctx context.Context, k subjectKey, side Side, retry bool, cached *entry) (*entry, error) {
	f, err := s.send(ctx, k, side, retry)
	if err != nil {
		return nil, err
	}
	if !retry {
		return cached, nil
	}
	return s.wait(ctx, f, cached)
}

func (s *Stage) send(ctx context.Context, k subjectKey, side Side, retry bool) (*fetch, error) {
	f := &fetch{k: k, side: side, retry: retry, done: make(chan struct{})}
	select {
	case s.reqs <- f:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	s.pending[k] = f
	s.mu.Unlock()
	return f, nil
}

// wait waits for f; on a failed refresh the cached schema serves on.
func (s *Stage) wait(ctx context.Context, f *fetch, cached *entry) (*entry, error) {
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.settle(f)
	if f.err != nil && (cached == nil || f.retry) {
		return nil, f.err
	}
	if f.e == nil {
		return cached, nil
	}
	return f.e, nil
}

// settle takes a finished fetch into the cache.
func (s *Stage) settle(f *fetch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[f.k] == f {
		delete(s.pending, f.k)
	}
	var missing *SubjectMissingError
	if errors.As(f.err, &missing) {
		s.missing[f.k] = missingSubject{at: s.clock(), err: missing}
	}
	if f.e != nil {
		delete(s.missing, f.k)
		s.cache[f.k] = f.e
	} else if e := s.cache[f.k]; e != nil && !f.retry {
		// A refresh that failed: try again an interval later, not on
		// every record.
		e.fetched = s.clock()
	}
}

// Run fetches schemas for Apply until ctx ends, retrying a registry that
// does not answer. It returns nil when ctx ends.
func (s *Stage) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-s.reqs:
			f.e, f.err = s.fetch(ctx, f)
			close(f.done)
		}
	}
}

// Reject hands on a row the layout could not make a record of.
func (s *Stage) Reject(ctx context.Context, re *outbox.RowError) error { return s.next.Reject(ctx, re) }
