package decoder

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/registry/srclient"
)

// Config configures a Decoder: the registry, and which sides of a record
// are in the wire format.
type Config struct {
	// URLs are the registry's base URLs, tried in turn
	// (https://registry:8081).
	URLs []string
	// Username and Password, when Username is set, are sent as HTTP basic
	// auth.
	Username, Password string
	// TLS, when set, is the TLS configuration of the connections to an
	// https registry (the CA and a client certificate). nil: Go's
	// defaults.
	TLS *tls.Config
	// Value and Key say which sides of a record to decode: those outboxd
	// writes with a --value-format or --key-format other than json.
	Value, Key bool
	// RequestTimeout bounds one request to the registry. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// DefaultRequestTimeout is Config.RequestTimeout's default: the producer's
// stage's (registry.DefaultRequestTimeout), so both halves wait as long
// for the same registry.
const DefaultRequestTimeout = 10 * time.Second

// Validate reports every problem of c at once, each a *field.Error naming
// the field: the registry's URLs and credentials follow the producer's
// rules (package registry's Config.Validate), so one registry setting
// serves both halves.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, problem string) { errs = append(errs, &field.Error{Field: name, Problem: problem}) }
	if len(c.URLs) == 0 {
		bad("URLs", "required: the schema registry's URL")
	}
	srclient.CheckAccess(c.URLs, c.Username, c.Password, bad)
	if !c.Value && !c.Key {
		bad("Value", "neither Value nor Key is set: a decoder of neither values nor keys decodes nothing")
	}
	return errors.Join(errs...)
}

// Decoder turns records in a schema registry's wire format back into what
// the outbox row held: the payload's JSON (or the text or bytes of a string
// or bytes schema). It looks each schema id up once and keeps its codec.
// It is safe for use by several goroutines.
type Decoder struct {
	cfg    Config
	cl     *sr.Client
	mu     sync.Mutex
	codecs map[int]*format.Codec
}

// UnavailableError is a registry that did not answer (a network error, a
// timeout, HTTP 5xx, 408 or 429), refused the credentials (401, 403), or
// is not at the URL (a 404 that is not its own): trying again later, or
// once someone fixed it, may succeed, and the record is not at fault.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return "schema registry unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// New builds a Decoder. It does no I/O.
func New(cfg Config) (*Decoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	var tc func() (*tls.Config, error)
	if cfg.TLS != nil {
		tc = func() (*tls.Config, error) { return cfg.TLS, nil }
	}
	cl, err := srclient.New(cfg.URLs, cfg.Username, cfg.Password, tc, cfg.RequestTimeout, "outboxd-idempotent")
	if err != nil {
		return nil, err
	}
	return &Decoder{cfg: cfg, cl: cl, codecs: map[int]*format.Codec{}}, nil
}

// Record returns a copy of r with its value and key decoded, as the
// config says; a null value or key stays null. r is not changed.
func (d *Decoder) Record(ctx context.Context, r *kgo.Record) (*kgo.Record, error) {
	out := *r
	var err error
	if d.cfg.Value && r.Value != nil {
		if out.Value, err = d.Decode(ctx, r.Value); err != nil {
			return nil, fmt.Errorf("decoding the value: %w", err)
		}
	}
	if d.cfg.Key && r.Key != nil {
		if out.Key, err = d.Decode(ctx, r.Key); err != nil {
			return nil, fmt.Errorf("decoding the key: %w", err)
		}
	}
	return &out, nil
}

// Decode decodes one value or key in the wire format, looking its schema
// id up in the registry when it is new.
func (d *Decoder) Decode(ctx context.Context, b []byte) ([]byte, error) {
	id, body, err := format.ID(b)
	if err != nil {
		return nil, err
	}
	c, err := d.codec(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.Decode(body)
}

func (d *Decoder) codec(ctx context.Context, id int) (*format.Codec, error) {
	d.mu.Lock()
	c := d.codecs[id]
	d.mu.Unlock()
	if c != nil {
		return c, nil
	}
	s, err := d.cl.SchemaByID(ctx, id)
	if err != nil {
		return nil, d.unavailable(fmt.Errorf("looking up schema id %d: %w", id, err))
	}
	refs, err := srclient.References(ctx, d.cl, s.References)
	if err != nil {
		return nil, d.unavailable(fmt.Errorf("looking up the references of schema id %d: %w", id, err))
	}
	if c, err = format.New(format.Schema{Format: format.Of(s.Type), Text: s.Schema, References: refs}); err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	d.mu.Lock()
	d.codecs[id] = c
	d.mu.Unlock()
	return c, nil
}

// unavailable marks err as the registry not answering, or not letting
// the consumer in, when it is: what the registry or its operator must
// fix, not the record. Only a schema id the registry says it does not
// have (error code 40403) is the record's.
func (d *Decoder) unavailable(err error) error {
	var re *sr.ResponseError
	switch {
	case srclient.Transient(err):
	case errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden):
	case errors.As(err, &re) && re.StatusCode == http.StatusNotFound && re.ErrorCode != schemaNotFound:
		// A 404 that is not the registry's own answer: a wrong base URL.
	default:
		return err
	}
	return &UnavailableError{Err: err}
}

// schemaNotFound is the registry's error code for an unknown schema id.
const schemaNotFound = 40403
