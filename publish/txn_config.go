package publish

import (
	"errors"
	"time"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
)

// TxnConfig configures the exactly-once sink ([TxnProducer]). Zero values
// take the defaults documented on each field.
type TxnConfig struct {
	// TransactionalID identifies the producer to Kafka's transaction
	// coordinator. Every process publishing one slot must use the same one:
	// a standby that takes the slot over initializes it, which fences the
	// process it replaces (its open transaction is aborted, and it cannot
	// write again). Default "": outboxd-<slot>-<system identifier>, stable
	// for a slot on a given database and shared by the active publisher and
	// its standbys. Two slots must never share one.
	TransactionalID string
	// ProgressTopic holds, per slot and database, the position of the last
	// event of the last committed Kafka transaction; it is written in the
	// same transaction as the records. Created with one partition and
	// cleanup.policy=compact when missing; an existing topic must be
	// compacted. Default DefaultProgressTopic.
	ProgressTopic string
	// Interval is the longest a Kafka transaction stays open: many
	// PostgreSQL transactions share one Kafka transaction until it is this
	// old, its commit included (the commit starts early by what commits
	// have taken lately, at most half the interval). Default
	// DefaultTransactionInterval. Longer costs fewer commits
	// (each is a round trip to the transaction coordinator and a marker
	// written to every partition in it) but read_committed consumers see
	// records that much later, and records are confirmed to PostgreSQL that
	// much later.
	Interval time.Duration
	// MaxRecords and MaxBytes end a Kafka transaction early once it holds
	// this many records or bytes (key, value, headers). Defaults
	// DefaultTransactionMaxRecords and DefaultTransactionMaxBytes: below the
	// pump's default window, so that a transaction commits before the window
	// waits on it. A PostgreSQL transaction larger than this spans several
	// Kafka transactions; the progress record says how far into it each got.
	MaxRecords int
	MaxBytes   int
	// Timeout is the transaction timeout Kafka enforces: a transaction open
	// longer (a publisher stopped, a broker unreachable) is aborted by the
	// coordinator, and outboxd sends its records again. It must not exceed
	// the brokers' transaction.max.timeout.ms (Kafka's default 15 min), or
	// initializing the producer fails. Default DefaultTransactionTimeout.
	Timeout time.Duration
	// Names renders the settings the transactional producer's messages
	// name (by this Config's field names) as its user set them.
	Names field.Names
}

// Defaults of TxnConfig.
const (
	DefaultTransactionInterval   = 100 * time.Millisecond
	DefaultTransactionMaxRecords = 5000
	DefaultTransactionMaxBytes   = 8 << 20
	DefaultTransactionTimeout    = time.Minute
)

// WithDefaults returns c with every zero field set to its default.
func (c TxnConfig) WithDefaults() TxnConfig {
	if c.ProgressTopic == "" {
		c.ProgressTopic = DefaultProgressTopic
	}
	if c.Interval <= 0 {
		c.Interval = DefaultTransactionInterval
	}
	if c.MaxRecords <= 0 {
		c.MaxRecords = DefaultTransactionMaxRecords
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultTransactionMaxBytes
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTransactionTimeout
	}
	return c
}

// Validate reports every problem of c at once, each a *field.Error naming
// the field; zero fields mean their defaults. NewTxn refuses a TxnConfig
// that does not validate.
func (c TxnConfig) Validate() error {
	var errs []error
	bad := func(name, problem string) { errs = append(errs, &field.Error{Field: name, Problem: problem}) }
	if t := c.ProgressTopic; t != "" {
		if err := outbox.ValidTopic(t); err != nil {
			bad("ProgressTopic", err.Error())
		}
	}
	for _, n := range []struct {
		field string
		neg   bool
	}{{"Interval", c.Interval < 0}, {"MaxRecords", c.MaxRecords < 0}, {"MaxBytes", c.MaxBytes < 0}, {"Timeout", c.Timeout < 0}} {
		if n.neg {
			bad(n.field, "must not be negative")
		}
	}
	// A transaction is committed every Interval: Kafka must not abort it first.
	if d := c.WithDefaults(); c.Timeout >= 0 && c.Interval >= 0 && d.Timeout <= d.Interval {
		bad("Timeout", "must be longer than the transaction interval ("+d.Interval.String()+")")
	}
	return errors.Join(errs...)
}
