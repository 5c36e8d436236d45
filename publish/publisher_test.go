package publish_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/publish"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func publishOne(t *testing.T, p *publish.Publisher, ev decode.Event) error {
	t.Helper()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p.Publish(ctx, &ev, func(err error) { done <- err })
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
	commit := time.Date(2026, 11, 30, 8, 0, 0, 123_000_000, time.UTC)
	ev := decode.Event{ID: 42, Topic: "t", Key: []byte("agg"), Value: []byte(`{"a":1}`), CommitTime: commit,
		Headers: []decode.Header{{Key: "id", Value: []byte("42")}, {Key: "type", Value: []byte("X")}}}
	if err := publishOne(t, p, ev); err != nil {
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
	if string(r.Key) != "agg" || string(r.Value) != `{"a":1}` || !r.Timestamp.Equal(commit) ||
		len(r.Headers) != 2 || r.Headers[0].Key != "id" || string(r.Headers[0].Value) != "42" || r.Headers[1].Key != "type" {
		t.Errorf("record = key %q value %q ts %s headers %v", r.Key, r.Value, r.Timestamp, r.Headers)
	}
}

// TestOversizeRecordFailsNamingIDAndTopic: the producer fails the record
// (never drops it) and the error names the outbox id and topic.
func TestOversizeRecordFailsNamingIDAndTopic(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := publish.New(publish.Config{Brokers: c.ListenAddrs(), MaxInFlightBytes: 1 << 20}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = publishOne(t, p, decode.Event{ID: 7, Topic: "t", Value: make([]byte, 2<<20)})
	var pe *publish.Error
	if !errors.As(err, &pe) || pe.ID != 7 || pe.Topic != "t" || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("err = %v, want a publish.Error for id 7 topic t wrapping MESSAGE_TOO_LARGE", err)
	}
	if !strings.Contains(err.Error(), `outbox id 7 to topic "t"`) {
		t.Errorf("error text %q", err)
	}
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
				if err := publishOne(t, p, decode.Event{ID: 1, Topic: "t", Value: []byte("{}")}); err != nil {
					t.Fatalf("publishing with SASL: %v", err)
				}
			} else if err := p.Ping(ctx); err == nil {
				// Without valid credentials a request must not succeed.
				if err := publishOne(t, p, decode.Event{ID: 1, Topic: "t", Value: []byte("{}")}); err == nil {
					t.Fatal("published without valid SASL credentials")
				}
			}
		})
	}
}
