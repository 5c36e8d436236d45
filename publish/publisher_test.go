package publish_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/publish"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func publishOne(t *testing.T, p *publish.Producer, ev outbox.Event) error {
	t.Helper()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p.Publish(&ev, func(err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestRecordContract checks the record built from an event (kfake: a unit
// test of the mapping; the integration tests use the real broker).
func TestRecordContract(t *testing.T) {
	t.Parallel()
	commit := time.Date(2026, 11, 30, 8, 0, 0, 123_000_000, time.UTC)
	occurred := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		ev     outbox.Event
		wantTS time.Time
	}{
		{
			name: "default table",
			ev: outbox.Event{Topic: "t", Key: []byte("agg"), Value: []byte(`{"a":1}`), CommitTime: commit,
				Headers: []outbox.Header{{Key: "id", Value: []byte("42")}, {Key: "type", Value: []byte("X")}}},
			wantTS: commit,
		},
		{
			name: "a timestamp column, a null and an empty header",
			ev: outbox.Event{Topic: "t", Key: []byte("agg"), Value: []byte(`{"a":1}`), CommitTime: commit, Timestamp: occurred,
				Headers: []outbox.Header{{Key: "id", Value: []byte("42")}, {Key: "tenant"}, {Key: "type", Value: []byte{}}}},
			wantTS: occurred,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p, err := publish.New(publish.Config{Brokers: c.ListenAddrs()}, quiet())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := publishOne(t, p, tt.ev); err != nil {
				t.Fatal(err)
			}
			cl, _ := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			defer cl.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			recs := cl.PollFetches(ctx).Records()
			if len(recs) != 1 {
				t.Fatalf("consumed %d records", len(recs))
			}
			r := recs[0]
			if string(r.Key) != string(tt.ev.Key) || string(r.Value) != string(tt.ev.Value) || !r.Timestamp.Equal(tt.wantTS) {
				t.Errorf("record = key %q value %q ts %s, want %q %q %s", r.Key, r.Value, r.Timestamp, tt.ev.Key, tt.ev.Value, tt.wantTS)
			}
			if len(r.Headers) != len(tt.ev.Headers) {
				t.Fatalf("headers %v, want %v", r.Headers, tt.ev.Headers)
			}
			for i, h := range tt.ev.Headers {
				got := r.Headers[i]
				if got.Key != h.Key || string(got.Value) != string(h.Value) || (got.Value == nil) != (h.Value == nil) {
					t.Errorf("header %d = %q: %q (null %v), want %q: %q (null %v)", i, got.Key, got.Value, got.Value == nil, h.Key, h.Value, h.Value == nil)
				}
			}
		})
	}
}

// TestOversizeRecordFailsNamingIDTopicAndLimit: the producer fails the
// record (never drops it) and the error names the outbox id, the topic and
// the client-side limit it broke.
func TestOversizeRecordFailsNamingIDTopicAndLimit(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	names := field.Flags(func(path string) string { return map[string]string{"MaxRecordBytes": "max-record-bytes"}[path] })
	p, err := publish.New(publish.Config{Brokers: c.ListenAddrs(), Names: names}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = publishOne(t, p, outbox.Event{Topic: "t", Value: make([]byte, 2<<20), Headers: idHeader("7")})
	var pe *publish.Error
	var tl *publish.TooLargeError
	if !errors.As(err, &pe) || pe.ID != "7" || pe.Topic != "t" || !errors.Is(err, outbox.ErrRecordTooLarge) || !errors.As(err, &tl) || !tl.Client {
		t.Fatalf("err = %v, want a publish.Error for id 7 topic t, too large for the client", err)
	}
	for _, want := range []string{`outbox id 7 to topic "t"`, "--max-record-bytes 1048588", "2097"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Just below the limit it is sent (the estimate of the framing is an
	// upper bound, franz-go's own check agrees).
	if err := publishOne(t, p, outbox.Event{Topic: "t", Value: make([]byte, publish.DefaultMaxRecordBytes-100)}); err != nil {
		t.Errorf("a record of the largest size allowed: %v", err)
	}
}

// TestDataLossIsReported pins the bug where franz-go's data-loss detection
// (the broker answering OUT_OF_ORDER_SEQUENCE_NUMBER for a batch after later
// ones were written) was visible only at debug level: it is an Error log
// and a counter.
func TestDataLossIsReported(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var logs testenv.SyncBuffer
	p, err := publish.New(publish.Config{Brokers: c.ListenAddrs()}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := publishOne(t, p, outbox.Event{Topic: "t", Value: []byte("{}"), Headers: idHeader("1")}); err != nil {
		t.Fatal(err)
	}
	// The next produce is answered as a broker that lost the earlier
	// batches would answer it.
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OutOfOrderSequenceNumber.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	if err := publishOne(t, p, outbox.Event{Topic: "t", Value: []byte("{}"), Headers: idHeader("2")}); err != nil {
		t.Fatalf("the record after the reported loss: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.DataLossEvents() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p.DataLossEvents() != 1 {
		t.Fatalf("DataLossEvents = %d, want 1", p.DataLossEvents())
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "data loss") || !strings.Contains(out, "partition=0") {
		t.Errorf("no Error log naming the partition:\n%s", out)
	}
}

// TestAbortFailsBufferedRecords: Abort returns once nothing is in flight;
// every record then has had its one callback, and the topic holds exactly
// the acknowledged ones: a record Abort failed is never written. (How many
// franz-go had already put into requests, and so could not abort, depends
// on timing: the test reports it.)
func TestAbortFailsBufferedRecords(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := publish.New(publish.Config{Brokers: c.ListenAddrs()}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := publishOne(t, p, outbox.Event{Topic: "t", Value: []byte("{}"), Headers: idHeader("0")}); err != nil {
		t.Fatal(err)
	}
	// Hold the broker's answers until the records are buffered behind them.
	release := make(chan struct{})
	var held atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		held.Add(1)
		<-release
		return nil, nil, false
	})
	// 20 MB: more batches of 1 MB than franz-go keeps in flight (5).
	const n = 2000
	payload := []byte(strings.Repeat("x", 10000))
	results := make(chan error, n)
	for i := range n {
		p.Publish(&outbox.Event{Topic: "t", Value: payload, Headers: idHeader(strconv.Itoa(i + 1))}, func(err error) { results <- err })
	}
	for held.Load() == 0 { // a request is in flight, the rest buffered behind it
		time.Sleep(time.Millisecond)
	}
	aborted := make(chan error, 1)
	go func() { aborted <- p.Abort(t.Context()) }()
	time.Sleep(100 * time.Millisecond)
	close(release)
	if err := <-aborted; err != nil {
		t.Fatal(err)
	}
	acked, failed := 0, 0
	for range n {
		if err := <-results; err == nil {
			acked++
		} else {
			failed++
		}
	}
	cl, _ := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	got := 0
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	for ctx.Err() == nil && got < acked+1 {
		got += cl.PollFetches(ctx).NumRecords()
	}
	if got != acked+1 {
		t.Errorf("the topic holds %d records, want %d: the acknowledged ones and the first, nothing aborted", got, acked+1)
	}
	t.Logf("measured: %d records acknowledged (in flight when aborted), %d aborted", acked, failed)
}

// TestSASLMechanisms: PLAIN and SCRAM credentials are passed through the
// options config.KafkaOpts builds (here set directly); a wrong password
// cannot reach the broker.
func TestSASLMechanisms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opt  kgo.Opt
		ok   bool
	}{
		{"plain", kgo.SASL(plain.Auth{User: "admin", Pass: "pw"}.AsMechanism()), true},
		{"plain wrong password", kgo.SASL(plain.Auth{User: "admin", Pass: "nope"}.AsMechanism()), false},
		{"scram-sha-256", kgo.SASL(scram.Auth{User: "admin", Pass: "pw"}.AsSha256Mechanism()), true},
		{"scram-sha-512", kgo.SASL(scram.Auth{User: "admin", Pass: "pw"}.AsSha512Mechanism()), true},
		{"none", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"), kfake.EnableSASL(),
				kfake.Superuser("PLAIN", "admin", "pw"), kfake.Superuser("SCRAM-SHA-256", "admin", "pw"), kfake.Superuser("SCRAM-SHA-512", "admin", "pw"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var opts []kgo.Opt
			if tt.opt != nil {
				opts = append(opts, tt.opt)
			}
			p, err := publish.New(publish.Config{Brokers: c.ListenAddrs(), Opts: opts}, quiet())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if tt.ok {
				if err := publishOne(t, p, outbox.Event{Topic: "t", Value: []byte("{}"), Headers: idHeader("1")}); err != nil {
					t.Fatalf("publishing with SASL: %v", err)
				}
			} else if err := p.Ping(ctx); err == nil {
				// Without valid credentials a request must not succeed.
				if err := publishOne(t, p, outbox.Event{Topic: "t", Value: []byte("{}"), Headers: idHeader("1")}); err == nil {
					t.Fatal("published without valid SASL credentials")
				}
			}
		})
	}
}

// idHeader is the headers of an event with outbox id id.
func idHeader(id string) []outbox.Header { return []outbox.Header{{Key: "id", Value: []byte(id)}} }
