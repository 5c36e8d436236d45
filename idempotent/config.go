package idempotent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/registry/decoder"
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

// ErrNoKey is matched by IDHeader's and SourceAndID's error for a record
// without an "id" header.
var ErrNoKey = errors.New("record has no key to deduplicate by")

// SourceHeader is the header outboxd puts right after the id header on
// every record: where the record comes from, "<system identifier>/<database>/<schema.table>"
// (or ".../message:<prefix>" for a table-less event). Records written by
// an outboxd older than the header have none. Only the first header of
// that name counts (outboxd's comes before a row's own headers).
const SourceHeader = "outboxd.source"

// KeySeparator separates the source from the id in SourceAndID's keys:
// the ASCII unit separator, U+001F (keys are PostgreSQL text, which
// cannot hold NUL).
const KeySeparator = "\x1f"

// IDHeader is a KeyFunc: the record's "id" header, the outbox id outboxd
// puts on every record, the same on every redelivery. The id alone is
// unique only within one source: a consumer of two outbox tables, or of
// two databases with bigserial ids, would take the second event with an
// id the first source used for a duplicate, and skip it. It was the
// default before SourceAndID; a consumer that keeps it keeps that risk.
func IDHeader(r *kgo.Record) (string, error) {
	id, _ := headers(r)
	if id == nil {
		return "", fmt.Errorf("%w: no id header", ErrNoKey)
	}
	if len(id) == 0 {
		return "", fmt.Errorf("%w: empty id header", ErrNoKey)
	}
	return string(id), nil
}

// SourceAndID is the default KeyFunc: the record's source and id,
// source + KeySeparator + id, unique across sources (two tables, two
// databases, two clusters), the same on every redelivery; the bare id
// (IDHeader's key) for a record without a source header (written by an
// older outboxd), or with an empty one. In the source, a backslash is
// written as two and U+001F as the four characters \x1f (PostgreSQL
// names may hold either), so that no two sources and ids make the same
// key. See Config.NoLegacyKeys for the keys recorded before the upgrade
// to it.
func SourceAndID(r *kgo.Record) (string, error) {
	id, err := IDHeader(r)
	if err != nil {
		return "", err
	}
	_, source := headers(r)
	if len(source) == 0 {
		return id, nil
	}
	return sourcedKey(string(source), id), nil
}

// sourcedKey is SourceAndID's key of a source and an id.
func sourcedKey(source, id string) string {
	if strings.ContainsAny(source, "\\\x1f") {
		source = keyEscaper.Replace(source)
	}
	return source + KeySeparator + id
}

var keyEscaper = strings.NewReplacer(`\`, `\\`, "\x1f", `\x1f`)

// headers returns the values of the first id and source headers of r
// (nil: none).
func headers(r *kgo.Record) (id, source []byte) {
	var haveID, haveSource bool
	for _, h := range r.Headers {
		switch {
		case h.Key == "id" && !haveID:
			id, haveID = h.Value, true
			if id == nil {
				id = []byte{} // a null id header: there, but empty
			}
		case h.Key == SourceHeader && !haveSource:
			source, haveSource = h.Value, true
		}
		if haveID && haveSource {
			break
		}
	}
	return id, source
}

// legacyKey returns the bare id of a record whose key is SourceAndID's
// with a source: the key the record had before outboxd named sources, that
// processed_keys may hold from before the upgrade (see Config.NoLegacyKeys);
// "" otherwise.
func legacyKey(r *kgo.Record, key string) string {
	id, source := headers(r)
	if len(source) == 0 || len(id) == 0 || key != sourcedKey(string(source), string(id)) {
		return ""
	}
	return string(id)
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
	// Key extracts the dedupe key. Default SourceAndID.
	Key KeyFunc
	// NoLegacyKeys turns the upgrade path off. Before outboxd named each
	// record's source, the default key was the bare id (IDHeader), and
	// processed_keys holds those. By default, a record whose key is
	// SourceAndID's with a source is also taken as processed when its bare
	// id was recorded before this consumer (Name) recorded its first key
	// with a source, so that a duplicate of a record processed before the
	// upgrade is still skipped; bare ids recorded later (records without a
	// source, from an outboxd not yet upgraded) never count. The risk
	// left: until the TTL has passed since that first key, a bare id
	// recorded before it also shadows another source's event with the
	// same id, which is then skipped as that duplicate (the loss this key
	// exists to prevent). A consumer that reads several sources whose ids
	// can collide sets NoLegacyKeys (a duplicate of a record processed
	// before the upgrade is then processed again), or adds the second
	// source only once the TTL has passed since the upgrade. A new
	// consumer (nothing in processed_keys) needs neither. Bare ids that
	// members of the old version record after that first key (a rolling
	// upgrade) do not count either: upgrade a group's members together.
	// See Store for how it is recorded.
	NoLegacyKeys bool
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
	// Decoder, when set, decodes each record's value and key from a schema
	// registry's wire format (outboxd's --value-format and --key-format
	// avro, protobuf or json-schema) to JSON, or the text of a string
	// schema, before the handler sees them (docs/schema-registry.md
	// says what each format gives back). The record is
	// keyed as before, by its headers; a dead letter keeps the bytes as
	// they came. A registry that does not answer (or refuses the
	// credentials, or is not at the URL) is retried like any outage; a record that cannot be decoded (an unknown schema id, bytes
	// not in the wire format) is refused like a handler's refusal.
	Decoder *decoder.Decoder
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
		c.Key = SourceAndID
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
