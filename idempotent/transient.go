package idempotent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/registry/decoder"
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
//   - PostgreSQL: class 08 (connection exception), class 53 (insufficient
//     resources: too many connections, disk full, out of memory), 40001
//     serialization failure, 40P01 deadlock, 55P03 lock not available
//     (lock_timeout), 57014 query canceled (statement_timeout, or an
//     operator's cancel), 57P01 admin shutdown, 57P02 crash shutdown,
//     57P03 cannot connect now (starting up, shutting down).
//   - pgx: a connection that could not be established because the server
//     did not answer (a refused, reset or unreachable connection, a server
//     that closed it; not a refused password or a TLS certificate that
//     does not verify: those stay as they are until someone changes them),
//     pgconn.SafeToRetry (nothing was sent), and a connection found closed
//     after the failure (connLostError).
//   - The network, where the operation itself failed: a dial, read or
//     write that was refused, reset, timed out or found no route, and a
//     DNS lookup that timed out or failed temporarily. Not an error that
//     merely implements net.Error (a URL that does not parse, an address
//     that is malformed): that is the handler's refusal.
//   - A schema registry that does not answer (Config.Decoder): a
//     decoder.UnavailableError (package registry/decoder).
//   - Kafka: a retriable Kafka error code, except an unknown topic or
//     partition (a missing dead-letter topic does not appear by waiting),
//     and franz-go's record timeout and retry limit.
//
// Everything else is permanent: another PostgreSQL code (a constraint
// violated, a permission denied, a syntax error), a deadline the handler
// set for itself (context.DeadlineExceeded: a record that always takes too
// long must not hold the partition for ever), a plain error.
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
	var ke *kerr.Error
	var ue *decoder.UnavailableError
	switch {
	case errors.As(err, &ue):
		return true
	case errors.As(err, &ke):
		return ke.Retriable && !errors.Is(err, kerr.UnknownTopicOrPartition) && !errors.Is(err, kerr.UnknownTopicID)
	case errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries):
		return true
	case pgconn.SafeToRetry(err), networkFailure(err):
		return true
	}
	return false
}

// networkFailure reports whether err is a network operation that failed
// for want of the other side: not a malformed address or URL, nor a TLS
// certificate that does not verify.
func networkFailure(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTimeout || dns.IsTemporary
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Timeout() {
		return true
	}
	// A server that closed the connection before or while answering.
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
}

// transientCode reports whether a PostgreSQL SQLSTATE is a transient
// failure (see transient).
func transientCode(code string) bool {
	switch code {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"55P03", // lock_not_available
		"57014", // query_canceled
		"57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03": // cannot_connect_now
		return true
	}
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53") // connection_exception, insufficient_resources
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
