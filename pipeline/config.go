package pipeline

import (
	"errors"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/registry"
	"github.com/outboxd/outboxd/slot"
)

// The delivery modes of Config.Delivery.
const (
	AtLeastOnce = "at-least-once"
	ExactlyOnce = "exactly-once"
)

// Config configures one Pipeline: each stage's own Config, and how they go
// together. Zero fields take the stages' defaults.
type Config struct {
	Stream cdc.Config     // database, slot, publication, columns, the stream's timings
	Pump   pump.Config    // in-flight window, dead-letter topic
	Kafka  publish.Config // brokers, record size, linger, client options (TLS, SASL)
	// Delivery is AtLeastOnce (default) or ExactlyOnce: records in Kafka
	// transactions with a progress record (Txn).
	Delivery string
	Txn      publish.TxnConfig
	// Registry, when a side has a schema format, encodes the records'
	// values and keys per their registered schemas (Avro, Protobuf, JSON
	// Schema) between the stream and the pump.
	Registry registry.Config
	// Monitor is how often the WAL the slot retains is checked and when
	// to warn; its database, slot and publication are the stream's.
	Monitor slot.MonitorConfig
	// Heartbeat is how often to write a heartbeat message so that an idle
	// slot advances; 0: off.
	Heartbeat time.Duration
	// Observer, when set, learns about the pipeline's transactions read
	// and records acknowledged or dead-lettered (metrics).
	Observer Observer
}

// Observer learns about a pipeline's transactions read and records
// acknowledged or dead-lettered; see pump.Observer.
type Observer = pump.Observer

// FieldError is a problem with one field of a Config, named by its path:
// "Stream.ReadLinger", "Pump.DeadLetterTopic", "Delivery".
type FieldError struct{ Field, Problem string }

func (e *FieldError) Error() string { return "pipeline: " + e.Field + ": " + e.Problem }

// FieldProblem returns the field and what is wrong with it.
func (e *FieldError) FieldProblem() (field, problem string) { return e.Field, e.Problem }

// monitor is c.Monitor with the stream's names.
func (c Config) monitor() slot.MonitorConfig {
	m, s := c.Monitor, c.Stream.WithDefaults()
	m.DatabaseURL, m.Slot, m.Publication = s.DatabaseURL, s.Slot, s.Publication
	return m
}

// Validate reports every problem of c at once (see Problems), joined.
func (c Config) Validate() error { return errors.Join(c.Problems()...) }

// Problems lists every problem of c: each stage's, as a *FieldError under
// the stage's field ("Stream.ReadLinger"), and the rules that span stages.
// None: c is valid.
func (c Config) Problems() []error {
	var errs []error
	add := func(stage string, err error) {
		for _, e := range unjoin(err) {
			var fe interface{ FieldProblem() (string, string) }
			if errors.As(e, &fe) {
				field, why := fe.FieldProblem()
				e = &FieldError{Field: stage + "." + field, Problem: why}
			}
			errs = append(errs, e)
		}
	}
	add("Stream", c.Stream.Validate())
	add("Pump", c.Pump.Validate())
	add("Kafka", c.Kafka.Validate())
	add("Registry", c.Registry.Validate())
	mon := c.monitor()
	for _, e := range unjoin(mon.Validate()) {
		// Its names are the stream's, reported there already.
		var fe *slot.FieldError
		if errors.As(e, &fe) && (fe.Field == "DatabaseURL" || fe.Field == "Slot" || fe.Field == "Publication") {
			continue
		}
		add("Monitor", e)
	}
	if c.Heartbeat < 0 {
		errs = append(errs, &FieldError{Field: "Heartbeat", Problem: "must not be negative"})
	}
	// Checked whatever the delivery: a mistake waits for the switch to
	// exactly-once otherwise.
	add("Txn", c.Txn.Validate())
	switch c.Delivery {
	case "", AtLeastOnce:
	case ExactlyOnce:
		// A dead letter is published after the records behind it: the
		// exactly-once sink would take it for one it already holds.
		if c.Pump.DeadLetterTopic != "" {
			errs = append(errs, &FieldError{Field: "Pump.DeadLetterTopic", Problem: "not with exactly-once delivery: " +
				"a dead letter is published after the records behind it, and the exactly-once sink would take it for one it already holds and lose it"})
		}
		if c.Stream.BackfillWhere != "" {
			errs = append(errs, &FieldError{Field: "Stream.BackfillWhere", Problem: "not supported with exactly-once delivery yet: run the backfill with at-least-once, then switch"})
		}
	default:
		errs = append(errs, &FieldError{Field: "Delivery", Problem: `"` + c.Delivery + `" is not ` + AtLeastOnce + " or " + ExactlyOnce})
	}
	return errs
}

// unjoin returns the errors errors.Join joined, or err alone.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
