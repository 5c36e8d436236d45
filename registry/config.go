package registry

import (
	"crypto/tls"
	"errors"
	"strings"
	"time"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/registry/srclient"
)

// The subject name strategies of Config.SubjectStrategy, as the registry's
// serializers name them.
const (
	// TopicName: "<topic>-value" and "<topic>-key" (the default).
	TopicName = "topic"
	// RecordName: the record's name (Side.Record), whatever the topic.
	RecordName = "record"
	// TopicRecordName: "<topic>-<record name>".
	TopicRecordName = "topic-record"
)

// Config configures a Stage.
type Config struct {
	// URLs are the registry's base URLs, tried in turn
	// (https://registry:8081).
	URLs []string
	// Username and Password, when Username is set, are sent as HTTP basic
	// auth.
	Username, Password string
	// TLS, when set, gives the TLS configuration of each new connection
	// to an https registry (the CA and a client certificate): asked again
	// for every connection, so that files renewed in place are read
	// (package tlsfiles). nil: Go's defaults.
	TLS func() (*tls.Config, error)

	Value, Key Side // what the record's value and key become

	// SubjectStrategy names the subject a record's schema is under:
	// TopicName (default), RecordName or TopicRecordName.
	SubjectStrategy string
	// AutoRegister registers Side.Schema under its subject before using
	// it, as the registry's serializers do with auto.register.schemas;
	// off by default: outboxd then only uses what the registry holds.
	AutoRegister bool
	// RefreshInterval is how often the latest schema of a subject is looked
	// up again, so that a new version is taken up. Default
	// DefaultRefreshInterval.
	RefreshInterval time.Duration
	// RequestTimeout bounds one request to the registry. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// Side is what one side of a record (its value or its key) becomes.
type Side struct {
	// Format is format.JSON (default: the row's bytes as they are, no
	// registry), format.Avro, format.Protobuf or format.JSONSchema.
	Format string
	// Record names the record's schema: an Avro record's full name, a
	// Protobuf message's (which also picks the file's message to encode),
	// a JSON Schema's title. The RecordName and TopicRecordName strategies
	// need it.
	Record string
	// Version pins the subject's schema version; 0: the latest.
	Version int
	// ID pins the schema by its registry id, whatever the subject holds.
	ID int
	// Schema is the schema text AutoRegister registers.
	Schema string
}

// Defaults of Config.
const (
	DefaultRefreshInterval = 5 * time.Minute
	DefaultRequestTimeout  = 10 * time.Second
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.SubjectStrategy == "" {
		c.SubjectStrategy = TopicName
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Value.Format == "" {
		c.Value.Format = format.JSON
	}
	if c.Key.Format == "" {
		c.Key.Format = format.JSON
	}
	return c
}

// Enabled reports whether either side has a schema format: without one
// there is no stage.
func (c Config) Enabled() bool {
	c = c.WithDefaults()
	return c.Value.Format != format.JSON || c.Key.Format != format.JSON
}

// Validate reports every problem of c at once, each a *field.Error naming
// the field; zero fields mean their defaults.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	bad := func(name, problem string) { errs = append(errs, &field.Error{Field: name, Problem: problem}) }
	enabled := c.Enabled()
	if enabled && len(c.URLs) == 0 {
		bad("URLs", "required with a schema format: the schema registry's URL")
	}
	srclient.CheckAccess(c.URLs, c.Username, c.Password, bad)
	switch c.SubjectStrategy {
	case TopicName, RecordName, TopicRecordName:
	default:
		bad("SubjectStrategy", `"`+c.SubjectStrategy+`" is not `+TopicName+", "+RecordName+" or "+TopicRecordName)
	}
	if c.RefreshInterval < 0 {
		bad("RefreshInterval", "must not be negative")
	}
	if c.RequestTimeout < 0 {
		bad("RequestTimeout", "must not be negative")
	}
	for _, s := range []struct {
		name string
		side Side
	}{{"Value", c.Value}, {"Key", c.Key}} {
		side, f := s.side, s.name+"."
		known := false
		for _, name := range format.Formats() {
			known = known || side.Format == name
		}
		if !known {
			bad(f+"Format", `"`+side.Format+`" is not one of `+strings.Join(format.Formats(), ", "))
			continue
		}
		if side.Format == format.JSON {
			if side.Record != "" || side.Version != 0 || side.ID != 0 || side.Schema != "" {
				bad(f+"Format", "json has no schema: its record name, version, id and schema are for avro, protobuf or json-schema")
			}
			continue
		}
		if c.SubjectStrategy != TopicName && side.Record == "" && side.ID == 0 {
			bad(f+"Record", "required with the "+c.SubjectStrategy+" subject name strategy: it names the subject")
		}
		if side.Version < 0 {
			bad(f+"Version", "must not be negative")
		}
		if side.ID < 0 {
			bad(f+"ID", "must not be negative")
		}
		if side.Version != 0 && side.ID != 0 {
			bad(f+"ID", "not with a version: an id pins the schema already")
		}
		if c.AutoRegister && side.Schema == "" {
			bad(f+"Schema", "required with auto-registration: the schema to register")
		}
		if c.AutoRegister && (side.Version != 0 || side.ID != 0) {
			bad(f+"Version", "not with auto-registration, which uses the schema it registered")
		}
		if !c.AutoRegister && side.Schema != "" {
			bad(f+"Schema", "only with auto-registration: otherwise the registry's schema is used")
		}
	}
	return errors.Join(errs...)
}
