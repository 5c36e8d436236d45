package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/registry/srclient"
)

// Retry pacing of a registry that does not answer.
const (
	retryFirst = 250 * time.Millisecond
	retryMax   = 10 * time.Second
)

// fetch resolves f's schema: until it succeeds, the answer is permanent
// or ctx ends when f retries, else once.
func (s *Stage) fetch(ctx context.Context, f *fetch) (*entry, error) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(retryFirst),
		backoff.WithMaxInterval(retryMax), backoff.WithMaxElapsedTime(0))
	for attempt := 1; ; attempt++ {
		e, err := s.resolve(ctx, f.k, f.side)
		if err == nil {
			if attempt > 1 {
				s.log.Info("schema registry answers again", "subject", f.k.subject, "attempts", attempt)
			}
			return e, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !f.retry {
			s.log.Warn("looking up the latest schema again failed; the cached one serves meanwhile", "subject", f.k.subject, "err", err)
			return nil, err
		}
		if !srclient.Transient(err) {
			return nil, err
		}
		wait := bo.NextBackOff()
		s.log.Warn("schema registry does not answer; records wait for it", "subject", f.k.subject, "attempt", attempt, "retry_in", wait, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// resolve fetches (or with AutoRegister registers) k's schema and the
// schemas it references, and builds its codec.
func (s *Stage) resolve(ctx context.Context, k subjectKey, side Side) (*entry, error) {
	var ss sr.SubjectSchema
	var err error
	what := fmt.Sprintf("subject %q", k.subject)
	switch {
	case s.cfg.AutoRegister:
		ss, err = s.cl.CreateSchema(ctx, k.subject, sr.Schema{Schema: side.Schema, Type: format.SchemaType(side.Format)})
		what = "registering the schema under " + what
	case side.ID != 0:
		ss.ID, what = side.ID, fmt.Sprintf("schema id %d", side.ID)
		ss.Schema, err = s.cl.SchemaByID(ctx, side.ID)
	default:
		v := side.Version
		if v == 0 {
			v = -1
		} else {
			what += fmt.Sprintf(" version %d", v)
		}
		ss, err = s.cl.SchemaByVersion(ctx, k.subject, v)
	}
	if err != nil {
		return nil, describe(what, err)
	}
	if want := format.SchemaType(side.Format); ss.Type != want {
		return nil, srclient.Permanentf("%s holds a %s schema, not %s", what, ss.Type, side.Format)
	}
	refs, err := srclient.References(ctx, s.cl, ss.References)
	if err != nil {
		return nil, describe(what+"'s references", err)
	}
	fs := format.Schema{Format: side.Format, Text: ss.Schema.Schema, References: refs}
	if side.Format == format.Protobuf {
		fs.Message = side.Record
	}
	c, err := format.New(fs)
	if err != nil {
		return nil, srclient.Permanentf("%s (id %d): %v", what, ss.ID, err)
	}
	s.log.Info("schema in use", "subject", k.subject, "schema_id", ss.ID, "version", ss.Version, "format", side.Format)
	return &entry{id: ss.ID, version: ss.Version, codec: c, fetched: s.clock()}, nil
}

// describe says what a registry error means for the pipeline, marking the
// answers retrying cannot change as permanent.
func describe(what string, err error) error {
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		return fmt.Errorf("asking the schema registry for %s: %w", what, err)
	}
	switch {
	case re.StatusCode == http.StatusNotFound && re.ErrorCode == subjectNotFound:
		return &SubjectMissingError{What: what, Message: re.Message}
	case re.StatusCode == http.StatusNotFound:
		return srclient.Permanentf("the schema registry has no %s (%s): register the schema, or turn auto-registration on", what, re.Message)
	case re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden:
		return srclient.Permanentf("the schema registry refused the credentials asking for %s (HTTP %d)", what, re.StatusCode)
	case srclient.Transient(re):
		return fmt.Errorf("asking the schema registry for %s: HTTP %d: %w", what, re.StatusCode, err)
	}
	return srclient.Permanentf("the schema registry refused %s (HTTP %d: %s)", what, re.StatusCode, re.Message)
}

// subjectNotFound is the registry's error code for a subject it does not
// know (Confluent's API, which Apicurio's ccompat API follows).
const subjectNotFound = 40401

// SubjectMissingError is the registry's answer that it does not know a
// subject. Where the subject follows from the record's topic (the topic
// and topic-record strategies), it is the record's fault (a new or
// mistyped topic): the record is refused as a row error, dead-lettered
// where there is a dead-letter topic. Otherwise it is the configuration's,
// and stops the pipeline.
type SubjectMissingError struct {
	What    string // `subject "orders-value"`
	Message string // the registry's
}

func (e *SubjectMissingError) Error() string {
	return fmt.Sprintf("the schema registry has no %s (%s): register the schema, or turn auto-registration on", e.What, e.Message)
}

// Unwrap marks it permanent: retrying does not make the subject exist.
func (e *SubjectMissingError) Unwrap() error {
	return srclient.PermanentError{Err: errors.New(e.Error())}
}
