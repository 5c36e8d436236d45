package idempotent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// transient reports whether err is a failure of the infrastructure that
// passes by itself: trying again later can succeed with nothing changed.
// The Consumer retries such a failure until its context ends and never
// counts it toward MaxAttempts, so a database restart or a Kafka outage
// never dead-letters a healthy record.
//
// It looks at the error, not at who returned it: a transient error the
// handler returns (a serialization failure or a deadlock of its own
// statements, its connection lost, a network error of a service it
// calls) is transient too, because the handler did not refuse the record,
// the infrastructure failed it. A handler that wants such a failure
// counted as a refusal returns an error that does not wrap it.
//
// Transient:
//   - PostgreSQL: class 08 (connection exception), 40001 serialization
//     failure, 40P01 deadlock, 53300 too many connections, 57P01 admin
//     shutdown, 57P02 crash shutdown, 57P03 cannot connect now (starting
//     up, shutting down).
//   - pgx: a connection that could not be established (unless the server
//     refused it with a code above not listed: a bad password is not
//     transient), pgconn.SafeToRetry (nothing was sent), pgconn.Timeout,
//     and a connection found closed after the failure (connLostError).
//   - The network: any net.Error (refused, reset, unreachable, timed
//     out, DNS); context.DeadlineExceeded (a deadline the handler set).
//   - Kafka: a retriable Kafka error code, except an unknown topic or
//     partition (a missing dead-letter topic does not appear by waiting),
//     and franz-go's record timeout and retry limit.
//
// Everything else is permanent: another PostgreSQL code (a constraint
// violated, a permission denied, a syntax error), a plain error.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var lost *connLostError
	if errors.As(err, &lost) {
		return true
	}
	// The server's word decides when there is one: a PgError inside a
	// ConnectError (a refused password) is as permanent as its code.
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return transientCode(pe.Code)
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke):
		return ke.Retriable && !errors.Is(err, kerr.UnknownTopicOrPartition) && !errors.Is(err, kerr.UnknownTopicID)
	case errors.As(err, &ce), errors.As(err, &ne):
		return true
	case pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries):
		return true
	}
	return false
}

// transientCode reports whether a PostgreSQL SQLSTATE is a transient
// failure (see transient).
func transientCode(code string) bool {
	switch code {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"53300", // too_many_connections
		"57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03": // cannot_connect_now
		return true
	}
	return strings.HasPrefix(code, "08") // connection_exception and its subclasses
}

// connLostError is a failure after which the transaction's connection was
// closed: whatever the error says (an unexpected EOF, a reset), the
// connection was lost, and the transaction with it.
type connLostError struct{ err error }

func (e *connLostError) Error() string { return fmt.Sprintf("connection lost: %v", e.err) }
func (e *connLostError) Unwrap() error { return e.err }

// stoppedError is a transient failure that was being retried when the
// context of Run ended: the record was neither processed nor refused.
type stoppedError struct{ err error }

func (e *stoppedError) Error() string {
	return fmt.Sprintf("stopped while retrying a transient failure: %v", e.err)
}
func (e *stoppedError) Unwrap() error { return e.err }
