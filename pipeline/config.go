package pipeline

import (
	"errors"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/field"
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
	Kafka  publish.Config // brokers, record size, linger, TLS and SASL
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
	// Paused: Run reads nothing from the slot and sends nothing to Kafka;
	// it keeps watching the slot (the WAL it retains, which grows, and
	// whether PostgreSQL invalidated it) until ctx ends. The slot stays
	// at its confirmed position, where the pipeline resumes when run
	// without Paused. Status says StatePaused, and since when.
	Paused bool
	// Observer, when set, learns about the pipeline's transactions read
	// and records acknowledged or dead-lettered (metrics).
	Observer Observer
	// Names renders the settings the stages' messages name (by this
	// Config's field paths, "Stream.Slot") as its user set them: a
	// command's flags or a pipelines file's keys. The zero Names shows the
	// paths. The stages get theirs from it (a stage's own Names is
	// replaced).
	Names field.Names
}

// Observer learns about a pipeline's transactions read and records
// acknowledged or dead-lettered; see pump.Observer.
type Observer = pump.Observer

// monitor is c.Monitor with the stream's names.
func (c Config) monitor() slot.MonitorConfig {
	m, s := c.Monitor, c.Stream.WithDefaults()
	m.DatabaseURL, m.PrimaryURL, m.Slot, m.Publication = s.DatabaseURL, s.PrimaryURL, s.Slot, s.Publication
	m.Names = c.Stream.SlotNames()
	m.Paused = c.Paused
	return m
}

// named is c with each stage's Names from c's.
func (c Config) named() Config {
	c.Stream.Names = c.Names.Under("Stream")
	c.Pump.Names = c.Names.Under("Pump")
	c.Kafka.Names = c.Names.Under("Kafka")
	c.Txn.Names = c.Names.Under("Txn")
	return c
}

// Validate reports every problem of c at once (see Problems), joined.
func (c Config) Validate() error { return errors.Join(c.Problems()...) }

// Problems lists every problem of c: each stage's, as a *field.Error under
// the stage's field ("Stream.ReadLinger"), and the rules that span stages.
// None: c is valid.
func (c Config) Problems() []error {
	c = c.named()
	var errs []error
	errs = append(errs, field.Under("Stream", c.Stream.Validate())...)
	errs = append(errs, field.Under("Pump", c.Pump.Validate())...)
	errs = append(errs, field.Under("Kafka", c.Kafka.Validate())...)
	errs = append(errs, field.Under("Registry", c.Registry.Validate())...)
	for _, e := range field.Under("Monitor", c.monitor().Validate()) {
		// Its names are the stream's, reported there already.
		var fe *field.Error
		if errors.As(e, &fe) && (fe.Field == "Monitor.DatabaseURL" || fe.Field == "Monitor.Slot" || fe.Field == "Monitor.Publication") {
			continue
		}
		errs = append(errs, e)
	}
	var p field.Problems
	if c.Heartbeat < 0 {
		p.Add("Heartbeat", "must not be negative")
	}
	// Checked whatever the delivery: a mistake waits for the switch to
	// exactly-once otherwise.
	errs = append(errs, field.Under("Txn", c.Txn.Validate())...)
	switch c.Delivery {
	case "", AtLeastOnce:
	case ExactlyOnce:
		// A dead letter is published after the records behind it: the
		// exactly-once sink would take it for one it already holds.
		if c.Pump.DeadLetterTopic != "" {
			p.Add("Pump.DeadLetterTopic", "not with exactly-once delivery: "+
				"a dead letter is published after the records behind it, and the exactly-once sink would take it for one it already holds and lose it")
		}
		if c.Stream.BackfillWhere != "" {
			p.Add("Stream.BackfillWhere", "not supported with exactly-once delivery yet: run the backfill with at-least-once, then switch")
		}
	default:
		p.Add("Delivery", `"`+c.Delivery+`" is not `+AtLeastOnce+" or "+ExactlyOnce)
	}
	// A schema format encodes what the layout made: with the Debezium
	// shape it takes the place of Debezium's value converter (Debezium's
	// Avro converter writes the payload's text under a string schema).
	if cols := c.Stream.Columns; cols.Shape == layout.ShapeDebezium && c.Registry.Value.Format != "" && c.Registry.Value.Format != format.JSON {
		if dz := cols.WithDefaults().Debezium; dz.ValueConverter != layout.ConverterString || dz.ExpandJSONPayload {
			p.Add("Registry.Value.Format", "with the Debezium layout, a schema format takes the place of Debezium's value converter (its Avro converter): "+
				"use the string value converter and no expanded JSON payload; for an expanded payload, register a record schema for it")
		}
	}
	return append(errs, p...)
}
