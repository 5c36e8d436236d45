package pump

import (
	"errors"
	"strings"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
)

// Config configures a Pump. Zero fields take the defaults below.
type Config struct {
	// MaxInFlightRecords caps the records handed to the sink and not yet
	// done. Default DefaultMaxInFlightRecords. Higher keeps throughput up
	// against a slow broker; lower bounds memory and what a crash re-sends
	// (at-least-once duplicates).
	MaxInFlightRecords int
	// MaxInFlightBytes caps the bytes (key, value and headers) of those
	// records: with large payloads it, not the record count, bounds memory.
	// Default DefaultMaxInFlightBytes. A single record larger than it is
	// still admitted, alone.
	MaxInFlightBytes int
	// DeadLetterTopic, when set, receives every record the sink fails for
	// good and every row that cannot become a record, unchanged (a row: its
	// key and payload) plus headers naming the original topic, outbox id,
	// commit LSN and the error; then the stream moves on. Default "": the
	// first such record stops the pipeline and nothing after it is
	// confirmed. The topic must exist. New refuses it with a sink that
	// needs records in position order (see PositionOrdered).
	DeadLetterTopic string
	// Budget, when set, is the process's in-flight budget, shared with its
	// other pipelines (see Budget): a record also needs room there. nil:
	// this pipeline's caps alone.
	Budget *Budget
	// Names renders the settings the pump's messages name (by this
	// Config's field names) as its user set them.
	Names field.Names
}

// Defaults of Config.
const (
	DefaultMaxInFlightRecords = 10000
	DefaultMaxInFlightBytes   = 16 << 20
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxInFlightRecords <= 0 {
		c.MaxInFlightRecords = DefaultMaxInFlightRecords
	}
	if c.MaxInFlightBytes <= 0 {
		c.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	return c
}

// Validate reports every problem of c at once, each a *field.Error naming
// the field; zero fields mean their defaults. New refuses a Config that
// does not validate.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, problem string) { errs = append(errs, &field.Error{Field: name, Problem: problem}) }
	if c.MaxInFlightRecords < 0 {
		bad("MaxInFlightRecords", "must not be negative")
	}
	if c.MaxInFlightBytes < 0 {
		bad("MaxInFlightBytes", "must not be negative")
	}
	if t := c.DeadLetterTopic; t != "" {
		if err := outbox.ValidTopic(t); err != nil {
			bad("DeadLetterTopic", err.Error())
		} else if strings.HasPrefix(t, "__") {
			bad("DeadLetterTopic", "a name beginning with \"__\" is a Kafka internal topic's")
		}
	}
	return errors.Join(errs...)
}

// errNoSink is New's answer without a sink.
var errNoSink = errors.New("pump: no sink")

// errDeadLetterOutOfOrder is New's answer for a dead-letter topic with a
// sink that needs records in position order.
var errDeadLetterOutOfOrder = errors.New("pump: a dead-letter topic needs a sink that takes records out of position order; " +
	"this sink (exactly-once) would take a dead letter, published after the records behind it, for one it already holds and lose it")
