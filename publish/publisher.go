package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/decode"
)

// Config configures the producer. Zero values take the defaults documented
// on each field.
type Config struct {
	// Brokers are the bootstrap addresses (HOST:PORT). Required.
	Brokers []string
	// ClientID is sent to Kafka with every request. Default "outboxd".
	ClientID string
	// MaxInFlightRecords caps records handed to the producer and not yet
	// acknowledged; Publish blocks at the cap. Default 10000. Higher keeps
	// throughput up against a slow broker; lower bounds memory and the
	// duplicates a crash can cause (at-least-once).
	MaxInFlightRecords int
	// MaxInFlightBytes caps the bytes of those records. Default 16 MiB.
	MaxInFlightBytes int
	// Linger is how long a partition's batch waits for more records.
	// Default 0: send as soon as possible (batches still form while a
	// request is in flight). Raise it for throughput at the cost of latency.
	Linger time.Duration
	// AllowAutoTopicCreation asks the broker to create topics it does not
	// know (the broker must have auto.create.topics.enable=true). Default
	// false: a record for an unknown topic stops the run with an error.
	AllowAutoTopicCreation bool
	// Opts are appended to the client options (TLS, SASL, ...).
	Opts []kgo.Opt
}

// Defaults for Config.
const (
	DefaultClientID           = "outboxd"
	DefaultMaxInFlightRecords = 10000
	DefaultMaxInFlightBytes   = 16 << 20
)

// Publisher produces outbox events to Kafka. Safe for concurrent use.
type Publisher struct {
	cl  *kgo.Client
	log *slog.Logger
}

// New creates the producer. It does not contact Kafka until the first
// record or Ping.
func New(cfg Config, log *slog.Logger) (*Publisher, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("creating Kafka producer: no brokers given")
	}
	if cfg.ClientID == "" {
		cfg.ClientID = DefaultClientID
	}
	if cfg.MaxInFlightRecords <= 0 {
		cfg.MaxInFlightRecords = DefaultMaxInFlightRecords
	}
	if cfg.MaxInFlightBytes <= 0 {
		cfg.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(cfg.MaxInFlightRecords),
		kgo.MaxBufferedBytes(cfg.MaxInFlightBytes),
		kgo.ProducerLinger(cfg.Linger),
		// RecordRetries and RecordDeliveryTimeout keep their unlimited
		// defaults: an unavailable broker delays records, never fails them.
		kgo.WithLogger(kgoLogger{log}),
	}
	if cfg.AllowAutoTopicCreation {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	opts = append(opts, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka producer: %w", err)
	}
	return &Publisher{cl: cl, log: log}, nil
}

// Publish hands ev to the producer and returns; done is called exactly once,
// from another goroutine, when the record is acknowledged (nil) or has failed
// for good. Publish blocks while the in-flight caps are reached; if ctx ends
// meanwhile, done receives ctx's error. Records are produced in the order of
// Publish calls; per partition Kafka keeps that order.
func (p *Publisher) Publish(ctx context.Context, ev *decode.Event, done func(error)) {
	rec := &kgo.Record{
		Topic:     ev.Topic,
		Key:       ev.Key,
		Value:     ev.Value,
		Timestamp: ev.CommitTime,
		Headers:   make([]kgo.RecordHeader, len(ev.Headers)),
	}
	for i, h := range ev.Headers {
		rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
	}
	id := ev.ID
	p.cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
		if err != nil {
			err = &Error{ID: id, Topic: r.Topic, Err: err}
		}
		done(err)
	})
}

// Flush waits until every record handed to Publish is acknowledged or
// failed, or ctx ends.
func (p *Publisher) Flush(ctx context.Context) error {
	if err := p.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flushing Kafka producer: %w", err)
	}
	return nil
}

// Ping checks that a broker answers.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := p.cl.Ping(ctx); err != nil {
		return fmt.Errorf("reaching Kafka: %w", err)
	}
	return nil
}

// BufferedBytes returns the bytes of the records handed over and not yet
// acknowledged or failed.
func (p *Publisher) BufferedBytes() int64 { return p.cl.BufferedProduceBytes() }

// Close closes the client; records still buffered fail with kgo.ErrClientClosed.
func (p *Publisher) Close() { p.cl.Close() }

// Error is a record that failed for good.
type Error struct {
	ID    int64 // outbox id
	Topic string
	Err   error
}

func (e *Error) Error() string {
	return "publishing outbox id " + strconv.FormatInt(e.ID, 10) + " to topic " + strconv.Quote(e.Topic) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }
