package idempotent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Handler processes one record inside tx, the transaction that also
// records the record's key. It runs at most once per key and consumer
// (among committed transactions): do every write the record causes
// through tx. tx is READ COMMITTED, whatever the database's default (see
// Store for why). An error (or a panic) rolls tx back, key included; the
// record is retried. ctx does not end with Run's context, so the batch in
// hand is finished, except on a retry after a transient failure.
//
// A transient error (a serialization failure or deadlock of tx's own
// statements, tx's connection lost, a network error; see Config.MaxAttempts)
// is retried for as long as Run's context lasts and never dead-letters the
// record; any other error is a refusal, retried up to MaxAttempts times.
// To have a transient failure counted as a refusal, return an error that
// does not wrap it. Check deferred constraints before returning (SET
// CONSTRAINTS ALL IMMEDIATE): a commit the database refuses is not the
// handler's error, and stops Run.
type Handler func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error

// KeyFunc returns the key a record is deduplicated by. An error means the
// record cannot be deduplicated: it is not processed (see Config.DeadLetterTopic).
type KeyFunc func(r *kgo.Record) (string, error)

// ErrNoKey is matched by IDHeader's error for a record without an "id" header.
var ErrNoKey = errors.New("record has no key to deduplicate by")

// IDHeader is the default KeyFunc: the record's "id" header, the outbox id
// outboxd puts on every record, the same on every redelivery.
func IDHeader(r *kgo.Record) (string, error) {
	for _, h := range r.Headers {
		if h.Key == "id" {
			if len(h.Value) == 0 {
				return "", fmt.Errorf("%w: empty id header", ErrNoKey)
			}
			return string(h.Value), nil
		}
	}
	return "", fmt.Errorf("%w: no id header", ErrNoKey)
}

// Config configures a Consumer. Zero fields take the defaults below.
type Config struct {
	// Brokers, Group and Topics are the consumer group's (required).
	Brokers []string
	Group   string
	Topics  []string
	// Handler processes each record once (required).
	Handler Handler
	// Name is the consumer's name in processed_keys: consumers with the
	// same name share their processed keys (the members of one group);
	// another name processes every record again (another service).
	// Default: Group.
	Name string
	// Key extracts the dedupe key. Default IDHeader.
	Key KeyFunc
	// BatchSize is the most records one database transaction processes.
	// Larger batches commit less often (throughput) and hold their keys'
	// locks longer. Default DefaultBatchSize.
	BatchSize int
	// MaxAttempts is how often the handler may refuse a record (return
	// an error that is not transient, or panic) before the record is
	// dead-lettered or, without a dead-letter topic, Run stops with the
	// error. The tries are alone, with exponential backoff from
	// RetryInitial to RetryMax. Default DefaultMaxAttempts.
	//
	// Transient failures do not count, whoever returned them: the
	// database unreachable or restarting (connection errors, SQLSTATE
	// class 08, 53300, 57P01, 57P02, 57P03), a serialization failure
	// (40001) or deadlock (40P01), Kafka unreachable, a network error or
	// a timeout. They are retried with the same backoff, each retry
	// logged at Warn, until Run's context ends: a healthy record is never
	// dead-lettered for an outage, however long.
	MaxAttempts  int
	RetryInitial time.Duration // default 100ms
	RetryMax     time.Duration // default 5s
	// DeadLetterTopic receives a record the handler refused MaxAttempts
	// times (or without a key), with headers saying why; its key is then
	// recorded as processed. A permanent failure outside the handler
	// (processed_keys missing, a permission denied) is never
	// dead-lettered: Run stops with it. Default "": stop instead, skipping
	// nothing.
	DeadLetterTopic string
	// KafkaOpts are added to the client's options: TLS, SASL, and for
	// outboxd's exactly-once mode kgo.FetchIsolationLevel(kgo.ReadCommitted()).
	KafkaOpts []kgo.Opt
	// Table is processed_keys' name (schema-qualified or not). Default
	// DefaultTable.
	Table string
	// TTL is how long a key is kept (by day partitions). It must exceed
	// the longest time after which a record can be delivered again: at
	// least the topic's retention.ms when groups may be reset to the
	// beginning, otherwise the longest outage after which outboxd re-sends
	// its unconfirmed tail plus the consumer's own longest lag. Default
	// DefaultTTL.
	TTL time.Duration
	// MaintenanceInterval is how often Run creates the coming days'
	// partitions and drops expired ones (also once at start). Negative:
	// never (run `outboxd processed-keys` from cron instead). Default 1h.
	MaintenanceInterval time.Duration
	// Metrics, when set, gets the consumer's metrics.
	Metrics prometheus.Registerer
	// Log gets lifecycle (Info), retries (Warn) and stops (Error). Default: discarded.
	Log *slog.Logger
}

// Defaults.
const (
	DefaultBatchSize   = 100
	DefaultMaxAttempts = 5
	DefaultTTL         = 7 * 24 * time.Hour
	// partitionsAhead is how many days ahead Maintain creates partitions,
	// so a maintenance that fails for a while does not stop inserts.
	partitionsAhead = 3
)

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = c.Group
	}
	if c.Key == nil {
		c.Key = IDHeader
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.RetryInitial <= 0 {
		c.RetryInitial = 100 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Second
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = time.Hour
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate reports every problem at once.
func (c Config) validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("no consumer group"))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("no topics"))
	}
	if c.Handler == nil {
		errs = append(errs, errors.New("no handler"))
	}
	if c.RetryMax < c.RetryInitial {
		errs = append(errs, errors.New("RetryMax is below RetryInitial"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("idempotent: %w", err)
	}
	return nil
}
