package pump

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/outbox"
)

// fakeSink records what the pump hands it; the test completes records.
type fakeSink struct {
	mu        sync.Mutex
	pending   []*sent
	published []outbox.Event
	ends      []outbox.Commit
	endErr    error
	aborts    int
	sync      func(ev *outbox.Event) error // when set, Publish calls done at once with its result
	lateAbort bool                         // Abort leaves pending records to be completed later
}

type sent struct {
	ev   outbox.Event
	done func(error)
}

func (s *fakeSink) Publish(ev *outbox.Event, done func(error)) {
	s.mu.Lock()
	s.published = append(s.published, *ev)
	f := s.sync
	if f == nil {
		s.pending = append(s.pending, &sent{ev: *ev, done: done})
	}
	s.mu.Unlock()
	if f != nil {
		done(f(ev))
	}
}

func (s *fakeSink) EndTxn(_ context.Context, c outbox.Commit) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ends = append(s.ends, c)
	return s.endErr
}

func (s *fakeSink) Abort(context.Context) error {
	s.mu.Lock()
	if s.lateAbort {
		s.aborts++
		s.mu.Unlock()
		return nil
	}
	pending := s.pending
	s.pending = nil
	s.aborts++
	s.mu.Unlock()
	for _, p := range pending {
		p.done(errors.New("aborted"))
	}
	return nil
}

// complete finishes the pending record with outbox id id.
func (s *fakeSink) complete(t *testing.T, id int64, err error) {
	t.Helper()
	s.mu.Lock()
	for i, p := range s.pending {
		if p.ev.ID() == strconv.FormatInt(id, 10) {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			s.mu.Unlock()
			p.done(err)
			return
		}
	}
	s.mu.Unlock()
	t.Fatalf("no pending record with outbox id %d", id)
}

func (s *fakeSink) publishedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.published {
		out = append(out, fmt.Sprintf("%s:%s", e.Topic, e.ID()))
	}
	return out
}

func begin(lsn outbox.LSN) outbox.Change {
	return outbox.Change{Kind: outbox.ChangeBegin, Begin: outbox.Begin{CommitLSN: lsn}}
}

func event(id int64, payload string) outbox.Change {
	return outbox.Change{Kind: outbox.ChangeEvent, Event: outbox.Event{Topic: "t", Key: []byte("k"), Value: []byte(payload),
		Headers: []outbox.Header{{Key: "id", Value: []byte(fmt.Sprint(id))}}, Table: "public.outbox", CommitLSN: 0x100}}
}

func commit(end outbox.LSN) outbox.Change {
	return outbox.Change{Kind: outbox.ChangeCommit, Commit: outbox.Commit{CommitLSN: end - 0x10, EndLSN: end}}
}

func newPump(t *testing.T, cfg Config, sink Sink) *Pump {
	t.Helper()
	p, err := New(cfg, sink, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	p.Start(0x10)
	return p
}

// runPump runs Run until the test ends and returns its result channel.
func runPump(t *testing.T, p *Pump) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return done
}

func apply(t *testing.T, p *Pump, msgs ...outbox.Change) {
	t.Helper()
	for i, m := range msgs {
		if err := p.Apply(t.Context(), m); err != nil {
			t.Fatalf("Apply message %d (%v): %v", i, m.Kind, err)
		}
	}
}

func TestAcksOutOfOrderConfirmInCommitOrder(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	p := newPump(t, Config{}, s)
	apply(t, p, begin(0x100), event(1, "a"), event(2, "b"), commit(0x200),
		begin(0x300), event(3, "c"), commit(0x400))
	steps := []struct {
		id   int64
		want outbox.LSN
	}{{3, 0x10}, {2, 0x10}, {1, 0x400}}
	for _, st := range steps {
		s.complete(t, st.id, nil)
		if got := p.Flushed(); got != st.want {
			t.Fatalf("after ack of %d: Flushed = %s, want %s", st.id, got, st.want)
		}
	}
	if st := p.Stats(); st.RecordsAcked != 3 || st.InFlightRecords != 0 || st.Transactions != 2 {
		t.Errorf("Stats = %+v, want 3 acked, none in flight, 2 transactions", st)
	}
	if len(s.ends) != 2 || s.ends[0].EndLSN != 0x200 || s.ends[1].EndLSN != 0x400 {
		t.Errorf("sink saw transaction ends %+v, want 0x200 and 0x400", s.ends)
	}
}

func TestPermanentErrorMidTransactionLatchesAndAborts(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	p := newPump(t, Config{}, s)
	result := runPump(t, p)
	apply(t, p, begin(0x100), event(1, "a"), commit(0x200), begin(0x300), event(2, "b"), event(3, "c"), commit(0x400))
	s.complete(t, 1, nil)
	s.complete(t, 3, nil)
	cause := errors.New("MESSAGE_TOO_LARGE")
	s.complete(t, 2, cause)
	select {
	case err := <-result:
		if !errors.Is(err, cause) || !strings.Contains(err.Error(), "commit LSN 0/100") {
			t.Fatalf("Run = %v, want the failure with its commit LSN", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after a permanent failure")
	}
	if s.aborts != 1 {
		t.Errorf("sink aborted %d times, want once", s.aborts)
	}
	if err := p.Apply(t.Context(), event(4, "d")); !errors.Is(err, cause) {
		t.Errorf("Apply after the failure = %v, want the latched failure", err)
	}
	if got := s.publishedIDs(); strings.Join(got, " ") != "t:1 t:2 t:3" {
		t.Errorf("published %v: nothing may be handed to the sink after the failure", got)
	}
	if got := p.Flushed(); got != 0x200 {
		t.Errorf("Flushed = %s, want 0/200: the failed transaction must never be confirmed", got)
	}
	if err := p.Drain(t.Context()); err != nil {
		t.Errorf("Drain after the failure: %v (a failed record must leave the window)", err)
	}
}

func TestTransactionHandedOverAtCommit(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	p := newPump(t, Config{}, s)
	apply(t, p, begin(0x100), event(1, "a"), event(2, "b"))
	if got := s.publishedIDs(); len(got) != 0 {
		t.Fatalf("published %v before the commit, want the transaction handed over whole", got)
	}
	apply(t, p, commit(0x200))
	if got := strings.Join(s.publishedIDs(), " "); got != "t:1 t:2" {
		t.Fatalf("published %q at the commit, want t:1 t:2", got)
	}
	// A large transaction still streams: a batch goes out every
	// maxBatchRecords.
	apply(t, p, begin(0x300))
	for i := range maxBatchRecords {
		apply(t, p, event(int64(10+i), "x"))
	}
	if n := len(s.publishedIDs()); n != 2+maxBatchRecords {
		t.Errorf("%d records published inside a large transaction, want %d", n-2, maxBatchRecords)
	}
}

// Regression: records batched for the open transaction hold room in the
// window; waiting for room without handing them over first never ended.
func TestFullWindowHandsOverTheBatch(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	p := newPump(t, Config{MaxInFlightRecords: 2}, s)
	apply(t, p, begin(0x100), event(1, "a"), event(2, "b"))
	applied := make(chan error, 1)
	go func() { applied <- p.Apply(t.Context(), event(3, "c")) }()
	waitFor(t, func() bool { return len(s.publishedIDs()) == 2 })
	s.complete(t, 1, nil)
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	apply(t, p, commit(0x200))
	s.complete(t, 2, nil)
	s.complete(t, 3, nil)
	if got := p.Flushed(); got != 0x200 {
		t.Errorf("Flushed = %s, want 0/200", got)
	}
}

func TestBatchDroppedAfterFailure(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	p := newPump(t, Config{}, s)
	result := runPump(t, p)
	apply(t, p, begin(0x100), event(1, "a"), commit(0x200), begin(0x300), event(2, "b"))
	cause := errors.New("TOPIC_AUTHORIZATION_FAILED")
	s.complete(t, 1, cause)
	if err := <-result; !errors.Is(err, cause) {
		t.Fatalf("Run = %v, want the failure", err)
	}
	if err := p.Apply(t.Context(), commit(0x400)); !errors.Is(err, cause) {
		t.Errorf("Apply(commit) after the failure = %v, want the latched failure", err)
	}
	if got := s.publishedIDs(); strings.Join(got, " ") != "t:1" {
		t.Errorf("published %v: the batch behind a failed record must not be handed over", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Drain(ctx); err != nil {
		t.Errorf("Drain after the failure: %v (the dropped batch must leave the window)", err)
	}
}

func TestDrainWaitsForRecordsInFlight(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	p := newPump(t, Config{}, s)
	apply(t, p, begin(0x100), event(1, "a"), event(2, "b"), commit(0x200))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := p.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with records in flight = %v, want the context's deadline", err)
	}
	drained := make(chan error, 1)
	go func() { drained <- p.Drain(t.Context()) }()
	s.complete(t, 1, nil)
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with a record still in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	s.complete(t, 2, nil)
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if got := p.Flushed(); got != 0x200 {
		t.Errorf("Flushed = %s after the drain, want 0/200", got)
	}
}

func TestSlowSinkFillsTheWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"records", Config{MaxInFlightRecords: 2}},
		{"bytes", Config{MaxInFlightBytes: 2*(1000+1+1+2) + 10}}, // two events of ~1 KB fit, a third does not
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &fakeSink{}
			p := newPump(t, tt.cfg, s)
			payload := strings.Repeat("x", 1000)
			apply(t, p, begin(0x100), event(1, payload), event(2, payload))
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			if err := p.Apply(ctx, event(3, payload)); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Apply into a full window = %v, want it to wait until the context ends", err)
			}
			if n := len(s.publishedIDs()); n != 2 {
				t.Fatalf("%d records published, want 2: the refused Apply must take nothing", n)
			}
			s.complete(t, 1, nil)
			apply(t, p, event(3, payload), commit(0x200))
			s.complete(t, 2, nil)
			s.complete(t, 3, nil)
			if got := p.Flushed(); got != 0x200 {
				t.Errorf("Flushed = %s, want 0/200", got)
			}
		})
	}
}

func TestOversizeRecordAdmittedAlone(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	p := newPump(t, Config{MaxInFlightBytes: 100}, s)
	apply(t, p, begin(0x100), event(1, strings.Repeat("x", 500)))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := p.Apply(ctx, event(2, "small")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply beside an oversize record = %v, want to wait", err)
	}
	s.complete(t, 1, nil)
	apply(t, p, event(2, "small"))
}

func TestSinkFailingAtCommit(t *testing.T) {
	t.Parallel()
	s := &fakeSink{endErr: errors.New("transaction fenced")}
	p := newPump(t, Config{}, s)
	apply(t, p, begin(0x100), event(1, "a"))
	if err := p.Apply(t.Context(), commit(0x200)); err == nil || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("Apply(commit) = %v, want the sink's error", err)
	}
}

func TestDeadLetterTopic(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	var obs countingObserver
	p := newPump(t, Config{DeadLetterTopic: "dlq"}, s)
	p.Observe(&obs)
	runPump(t, p)
	apply(t, p, begin(0x100), event(1, "a"), event(2, "b"), commit(0x200))
	s.complete(t, 1, nil)
	s.complete(t, 2, fmt.Errorf("publishing outbox id 2: %w", outbox.ErrRecordTooLarge))
	waitFor(t, func() bool { return len(s.publishedIDs()) == 3 })
	dl := s.published[2]
	if dl.Topic != "dlq" || string(dl.Value) != "b" || string(dl.Key) != "k" {
		t.Fatalf("dead-letter record %+v, want the original key and value on topic dlq", dl)
	}
	for k, want := range map[string]string{"id": "2", hdrTopic: "t", hdrOutboxID: "2", hdrCommitLSN: "0/100", hdrTable: "public.outbox"} {
		if got := header(&dl, k); got != want {
			t.Errorf("dead-letter header %s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(header(&dl, hdrError), "record too large") {
		t.Errorf("dead-letter error header %q does not say why", header(&dl, hdrError))
	}
	if got := p.Flushed(); got != 0x10 {
		t.Fatalf("Flushed = %s before the dead-letter record was acknowledged", got)
	}
	s.complete(t, 2, nil)
	if got := p.Flushed(); got != 0x200 {
		t.Errorf("Flushed = %s after the dead-letter record, want 0/200: the stream moves on", got)
	}
	if st := p.Stats(); st.DeadLettered != 1 || st.RecordsAcked != 1 || p.Err() != nil {
		t.Errorf("Stats = %+v, Err = %v; want one acknowledged, one dead-lettered, no failure", st, p.Err())
	}
	if obs.deadLettered["t"] != 1 {
		t.Errorf("observer saw dead-lettered %v, want t: 1", obs.deadLettered)
	}
}

func TestDeadLetterTooLargeGoesAsReference(t *testing.T) {
	t.Parallel()
	tooLarge := fmt.Errorf("refused: %w", outbox.ErrRecordTooLarge)
	calls := 0
	s := &fakeSink{sync: func(ev *outbox.Event) error {
		calls++
		if ev.Value != nil {
			return tooLarge // the original and its dead-letter copy
		}
		return nil // the reference
	}}
	p := newPump(t, Config{DeadLetterTopic: "dlq"}, s)
	runPump(t, p)
	ev := event(1, strings.Repeat("x", 100))
	ev.Event.Headers = append(ev.Event.Headers, outbox.Header{Key: outbox.SourceHeader, Value: []byte("7001/app/public.outbox")},
		outbox.Header{Key: "type", Value: []byte("big")})
	apply(t, p, begin(0x100), ev, commit(0x200))
	waitFor(t, func() bool { return p.Flushed() == 0x200 })
	ref := s.published[len(s.published)-1]
	if ref.Value != nil || header(&ref, hdrSize) != "100" || header(&ref, "id") != "1" || ref.Topic != "dlq" ||
		header(&ref, outbox.SourceHeader) != "7001/app/public.outbox" || header(&ref, "type") != "" {
		t.Errorf("reference %+v, want no value, the size, the id and the source, no other header, on dlq", ref)
	}
	if calls != 3 {
		t.Errorf("%d publishes, want 3 (original, dead-letter copy, reference)", calls)
	}
}

func TestDeadLetterRefusedStops(t *testing.T) {
	t.Parallel()
	s := &fakeSink{sync: func(ev *outbox.Event) error { return errors.New("TOPIC_AUTHORIZATION_FAILED") }}
	p := newPump(t, Config{DeadLetterTopic: "dlq"}, s)
	result := runPump(t, p)
	apply(t, p, begin(0x100), event(1, "a"), commit(0x200))
	select {
	case err := <-result:
		if err == nil || !strings.Contains(err.Error(), "dead-letter topic dlq") {
			t.Fatalf("Run = %v, want a failure naming the dead-letter topic", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop when the dead-letter topic refused the record")
	}
	if got := p.Flushed(); got != 0x10 {
		t.Errorf("Flushed = %s, want nothing confirmed", got)
	}
}

func TestRejectedRow(t *testing.T) {
	t.Parallel()
	re := &outbox.RowError{Table: "public.outbox", Column: "headers", ID: "7", Source: "7001/app/public.outbox", Err: errors.New("headers are a JSON array"),
		Topic: "orders", Key: []byte("k"), Value: []byte(`{"a": 1}`), CommitLSN: 0x100, Index: 3}
	t.Run("stops without a dead-letter topic", func(t *testing.T) {
		t.Parallel()
		p := newPump(t, Config{}, &fakeSink{})
		apply(t, p, begin(0x100))
		err := p.Reject(t.Context(), re)
		if !errors.Is(err, re) || !strings.Contains(err.Error(), "outbox id 7") || !strings.Contains(err.Error(), "commit LSN 0/100") {
			t.Fatalf("Reject = %v, want the row error with its outbox id and commit LSN", err)
		}
	})
	t.Run("dead-lettered", func(t *testing.T) {
		t.Parallel()
		s := &fakeSink{}
		p := newPump(t, Config{DeadLetterTopic: "dlq"}, s)
		apply(t, p, begin(0x100))
		if err := p.Reject(t.Context(), re); err != nil {
			t.Fatal(err)
		}
		apply(t, p, commit(0x200))
		dl := s.published[0]
		if dl.Topic != "dlq" || string(dl.Value) != `{"a": 1}` || header(&dl, "id") != "7" || header(&dl, hdrTopic) != "orders" || dl.Index != 3 {
			t.Errorf("dead-letter record %+v, want the row's key, payload, id and topic", dl)
		}
		// Regression (issue 37): a dead-lettered row lost its source, so a
		// consumer of the dead-letter topic could not key it as the record.
		if got := header(&dl, outbox.SourceHeader); got != "7001/app/public.outbox" {
			t.Errorf("dead-letter record's %s header %q, want the row's source", outbox.SourceHeader, got)
		}
		if p.Flushed() != 0x10 {
			t.Fatal("confirmed before the dead-letter record was acknowledged")
		}
		s.complete(t, 7, nil)
		if p.Flushed() != 0x200 {
			t.Errorf("Flushed = %s, want 0/200", p.Flushed())
		}
	})
}

// A logical decoding message under the events prefix sent outside any
// transaction is in no transaction of the stream: it stops, naming the LSN
// to advance past, or is dead-lettered in a transaction of its own whose
// end, just after the message, is confirmed once Kafka has it, also when
// the window was full at the first offer.
func TestRejectedStandaloneMessage(t *testing.T) {
	t.Parallel()
	re := &outbox.RowError{Table: "message:outboxd.event", ID: "0/250", MessageLSN: 0x250, Standalone: true,
		Err: errors.New("a non-transactional message"), Topic: "orders", Value: []byte("1"), CommitLSN: 0x250}
	t.Run("stops without a dead-letter topic", func(t *testing.T) {
		t.Parallel()
		p := newPump(t, Config{}, &fakeSink{})
		err := p.Reject(t.Context(), re)
		if !errors.Is(err, re) || !strings.Contains(err.Error(), "pg_replication_slot_advance('<slot>', '0/250'::pg_lsn + 1)") {
			t.Fatalf("Reject = %v, want the row error and the way past it", err)
		}
	})
	t.Run("dead-lettered in a transaction of its own", func(t *testing.T) {
		t.Parallel()
		s := &fakeSink{}
		p := newPump(t, Config{DeadLetterTopic: "dlq", MaxInFlightRecords: 1}, s)
		apply(t, p, begin(0x100), event(1, "a"), commit(0x200))
		// The window is full: the first offer waits until ctx ends and
		// takes nothing; the reader offers it again.
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if err := p.Reject(ctx, re); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Reject with a full window = %v, want ctx's error", err)
		}
		s.complete(t, 1, nil)
		if err := p.Reject(t.Context(), re); err != nil {
			t.Fatal(err)
		}
		if got := p.Flushed(); got != 0x200 {
			t.Fatalf("Flushed = %s before the dead letter's ack, want 0/200", got)
		}
		s.mu.Lock()
		dl := s.pending[0]
		s.mu.Unlock()
		if dl.ev.Topic != "dlq" || header(&dl.ev, "id") != "0/250" || header(&dl.ev, hdrTable) != "message:outboxd.event" {
			t.Fatalf("dead letter %+v, want the message's id and source", dl.ev)
		}
		dl.done(nil)
		if got := p.Flushed(); got != 0x251 {
			t.Errorf("Flushed = %s after the dead letter's ack, want 0/251, just past the message", got)
		}
		apply(t, p, begin(0x300), event(2, "b"), commit(0x400))
		s.complete(t, 2, nil)
		if got := p.Flushed(); got != 0x400 {
			t.Errorf("Flushed = %s, want 0/400", got)
		}
	})
}

type countingObserver struct {
	mu           sync.Mutex
	deadLettered map[string]int
	received     []time.Time
	sent         []time.Time
}

func (o *countingObserver) Received(commitTime, sentTime time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.received = append(o.received, commitTime)
	o.sent = append(o.sent, sentTime)
}

func (o *countingObserver) Acknowledged(string, int, time.Duration, time.Time) {}
func (o *countingObserver) DeadLettered(topic string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.deadLettered == nil {
		o.deadLettered = map[string]int{}
	}
	o.deadLettered[topic]++
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Regression: a stream that ended inside a transaction (the connection
// broke) sent that transaction's batched records at Drain, although the
// next stream sends the whole transaction again: only duplicates.
func TestDrainDropsTheOpenTransactionsBatch(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	p := newPump(t, Config{}, s)
	apply(t, p, begin(0x100), event(1, "a"), commit(0x200), begin(0x300), event(2, "b"), event(3, "c"))
	s.complete(t, 1, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v (the open transaction's batch must leave the window)", err)
	}
	if got := strings.Join(s.publishedIDs(), " "); got != "t:1" {
		t.Errorf("published %q, want only t:1: the open transaction is sent again by the next stream", got)
	}
	if got := p.Flushed(); got != 0x200 {
		t.Errorf("Flushed = %s, want 0/200: never past the open transaction", got)
	}
}

func TestObserverHearsEachCommit(t *testing.T) {
	t.Parallel()
	var obs countingObserver
	p := newPump(t, Config{}, &fakeSink{})
	p.Observe(&obs)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c1, c2 := commit(0x200), commit(0x400)
	c1.Commit.CommitTime, c2.Commit.CommitTime = at, at.Add(time.Second)
	c1.Commit.SentTime, c2.Commit.SentTime = at.Add(time.Millisecond), at.Add(time.Second+time.Millisecond)
	apply(t, p, begin(0x100), event(1, "a"), c1, begin(0x300), c2)
	if len(obs.received) != 2 || !obs.received[0].Equal(at) || !obs.received[1].Equal(at.Add(time.Second)) {
		t.Errorf("observer received commit times %v, want %v and one second later", obs.received, at)
	}
	if len(obs.sent) != 2 || !obs.sent[0].Equal(c1.Commit.SentTime) || !obs.sent[1].Equal(c2.Commit.SentTime) {
		t.Errorf("observer received send times %v, want %v and %v", obs.sent, c1.Commit.SentTime, c2.Commit.SentTime)
	}
}

// Regression: a record the sink refused on the spot latched the failure,
// but the records after it in the same batch were still handed over.
func TestRefusedRecordStopsTheRestOfItsBatch(t *testing.T) {
	t.Parallel()
	refused := errors.New("record too large")
	s := &fakeSink{sync: func(ev *outbox.Event) error {
		if ev.ID() == "2" {
			return refused
		}
		return nil
	}}
	p := newPump(t, Config{}, s)
	apply(t, p, begin(0x100), event(1, "a"), event(2, "b"), event(3, "c"), event(4, "d"))
	if err := p.Apply(t.Context(), commit(0x200)); !errors.Is(err, refused) {
		t.Fatalf("Apply(commit) = %v, want the refusal", err)
	}
	if got := strings.Join(s.publishedIDs(), " "); got != "t:1 t:2" {
		t.Errorf("published %q, want t:1 t:2: nothing after the refused record", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Drain(ctx); err != nil {
		t.Errorf("Drain: %v (the dropped records must leave the window)", err)
	}
}

// Regression: with a dead-letter topic, a record failed only because its
// Kafka transaction was aborted (exactly-once sink) must stop the pipeline,
// not be dead-lettered and confirmed past as if it were at fault.
func TestAbortedTransactionIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	s := &fakeSink{}
	p := newPump(t, Config{DeadLetterTopic: "dlq"}, s)
	done := runPump(t, p)
	apply(t, p, begin(0x100), event(1, "a"), commit(0x200))
	s.complete(t, 1, fmt.Errorf("%w: another record failed", outbox.ErrTransactionAborted))
	select {
	case err := <-done:
		if !errors.Is(err, outbox.ErrTransactionAborted) {
			t.Fatalf("Run = %v, want the aborted transaction's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop on a record failed with its transaction")
	}
	if ids := s.publishedIDs(); len(ids) != 1 {
		t.Errorf("published %v: the record went to the dead-letter topic", ids)
	}
	if got := p.Flushed(); got != 0x10 {
		t.Errorf("Flushed = %s, want 0/10: nothing may be confirmed past the failed record", got)
	}
}

// orderedSink is a fakeSink that needs records in position order, as the
// exactly-once producer does.
type orderedSink struct{ fakeSink }

func (*orderedSink) NeedsPositionOrder() bool { return true }

// Regression (issue 37): with the exactly-once sink and a dead-letter
// topic, used as a library, the dead letter was published after later
// positions; the sink took it for a duplicate, reported it done, and the
// watermark passed it: lost every time. Only the command refused it.
func TestDeadLetterTopicRefusedWithAPositionOrderedSink(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		sink    Sink
		refused bool
	}{
		{"ordered sink with a dead-letter topic", Config{DeadLetterTopic: "dlq"}, &orderedSink{}, true},
		{"ordered sink without one", Config{}, &orderedSink{}, false},
		{"plain sink with a dead-letter topic", Config{DeadLetterTopic: "dlq"}, &fakeSink{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, tt.sink, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if got := errors.Is(err, errDeadLetterOutOfOrder); got != tt.refused || (err != nil && !tt.refused) {
				t.Errorf("New = %v, want refused %v", err, tt.refused)
			}
		})
	}
}

// Regression (issue 37): Run returned on a failure leaving queued
// dead-letter jobs holding their room in the window, so the exit's Drain
// waited out the whole shutdown timeout for records nobody would publish;
// so did a record refused while draining after a graceful stop.
func TestDeadLettersNotPublishedGiveTheirRoomBack(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"queued before the failure", "queued after Run returned"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			s := &fakeSink{lateAbort: true}
			p := newPump(t, Config{DeadLetterTopic: "dlq"}, s)
			apply(t, p, begin(0x100), event(1, "a"), event(2, "b"), commit(0x200))
			refuse := func() { s.complete(t, 1, fmt.Errorf("publishing outbox id 1: %w", outbox.ErrRecordTooLarge)) }
			if when == "queued before the failure" {
				refuse()
				<-p.dlWake // Run sees only the failure, as when both are ready and it picks that one
			}
			if when == "queued before the failure" {
				p.fail(errors.New("the stream broke"))
				if err := <-runPump(t, p); err == nil {
					t.Fatal("Run returned nil after a failure")
				}
			} else { // a graceful stop: Run ends with its context, then a record is refused while draining
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				if err := p.Run(ctx); err != nil {
					t.Fatalf("Run = %v after its context ended, want nil", err)
				}
				refuse()
			}
			s.complete(t, 2, errors.New("aborted")) // the sink's late callback for the other record
			if n, _ := p.win.inFlight(); n != 0 {
				t.Fatalf("%d records hold the window after Run returned, want 0: Drain would wait for a dead letter nobody publishes", n)
			}
			if got := p.Flushed(); got != 0x10 {
				t.Errorf("Flushed = %s, want nothing confirmed past the record never dead-lettered", got)
			}
			if err := p.Drain(t.Context()); err != nil {
				t.Errorf("Drain = %v", err)
			}
		})
	}
}

// panickySink panics in Publish for an event whose payload is "boom", and
// otherwise keeps the record for the test to complete.
type panickySink struct{ fakeSink }

func (s *panickySink) Publish(ev *outbox.Event, done func(error)) {
	if string(ev.Value) == "boom" {
		panic("a bug in the sink")
	}
	s.fakeSink.Publish(ev, done)
}

// panickyObserver panics when told of an acknowledgment.
type panickyObserver struct{ countingObserver }

func (*panickyObserver) Acknowledged(string, int, time.Duration, time.Time) {
	panic("a bug in the observer")
}

// TestPanicFailsThePumpNotTheProcess is issue 49, item 3: a panic in a
// pipeline (here in the sink, called from the reader's goroutine, or in
// the acknowledgment's callback, called from the sink's) killed the
// process and every pipeline in it. The pump fails with a
// *contain.PanicError instead, nothing after the record is handed over,
// the watermark never passes it, and Drain does not wait for the record
// the sink never took.
func TestPanicFailsThePumpNotTheProcess(t *testing.T) {
	t.Parallel()
	t.Run("in the sink's Publish", func(t *testing.T) {
		t.Parallel()
		s := &panickySink{}
		p := newPump(t, Config{}, s)
		result := runPump(t, p)
		apply(t, p, begin(0x100), event(1, "a"), commit(0x200))
		s.complete(t, 1, nil)
		apply(t, p, begin(0x300), event(2, "b"), event(3, "boom"), event(4, "c"))
		err := p.Apply(t.Context(), commit(0x400))
		var pe *contain.PanicError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "outbox id 3") || !strings.Contains(string(pe.Stack), "panickySink") {
			t.Fatalf("Apply at the commit = %v, want a *contain.PanicError naming outbox id 3, with the stack", err)
		}
		select {
		case err := <-result:
			if !errors.As(err, &pe) {
				t.Errorf("Run = %v, want the panic", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after the panic")
		}
		if got := s.publishedIDs(); strings.Join(got, " ") != "t:1 t:2" {
			t.Errorf("published %v, want 1 and 2: nothing after the record whose hand-over panicked", got)
		}
		if got := p.Flushed(); got != 0x200 {
			t.Errorf("Flushed = %s, want 0/200", got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := p.Drain(ctx); err != nil {
			t.Errorf("Drain: %v; it waits for a record the sink never took", err)
		}
	})
	t.Run("in the acknowledgment's callback", func(t *testing.T) {
		t.Parallel()
		s := &fakeSink{}
		p := newPump(t, Config{}, s)
		p.Observe(&panickyObserver{})
		result := runPump(t, p)
		apply(t, p, begin(0x100), event(1, "a"), commit(0x200))
		s.complete(t, 1, nil) // a panic on the sink's goroutine would end the test binary
		select {
		case err := <-result:
			var pe *contain.PanicError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), "outbox id 1") {
				t.Errorf("Run = %v, want a *contain.PanicError naming outbox id 1", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after the panic")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := p.Drain(ctx); err != nil {
			t.Errorf("Drain: %v", err)
		}
	})
}

// renewingSink is a fakeSink that counts the streams it was told of.
type renewingSink struct {
	fakeSink
	renewed int
}

func (s *renewingSink) Renew() { s.renewed++ }

// Issue 49, item 14: the exactly-once producer kept its state from one
// stream to the next, though another process may have held the slot in
// between; each stream's Start now tells a Renewer sink.
func TestEveryStreamRenewsARenewerSink(t *testing.T) {
	t.Parallel()
	sink := &renewingSink{}
	p := newPump(t, Config{}, sink) // the first stream
	p.Start(0x20)
	if sink.renewed != 2 {
		t.Fatalf("the sink was renewed %d times over 2 streams, want 2", sink.renewed)
	}
}
