package idempotent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// transient tells the infrastructure's passing failures from refusals,
// whoever returned them: a serialization failure the handler returns is
// as transient as one from the Consumer's own statements, and an EOF the
// handler returns (a payload cut short) is a refusal unless the
// connection was found closed.
func TestTransientTellsInfrastructureFromRefusals(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code} }
	byHandler := func(err error) error {
		return &handlerError{key: "1", err: fmt.Errorf("storing the order: %w", err)}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"no error", nil, false},
		{"serialization failure", pg("40001"), true},
		{"serialization failure returned by the handler", byHandler(pg("40001")), true},
		{"deadlock", pg("40P01"), true},
		{"admin shutdown", pg("57P01"), true},
		{"crash shutdown", pg("57P02"), true},
		{"cannot connect now", pg("57P03"), true},
		{"connection failure", pg("08006"), true},
		{"too many connections", pg("53300"), true},
		{"unique violation", pg("23505"), false},
		{"not-null violation returned by the handler", byHandler(pg("23502")), false},
		{"permission denied", pg("42501"), false},
		{"undefined table", pg("42P01"), false},
		{"bad password", pg("28P01"), false},
		{"connection lost", &connLostError{err: io.ErrUnexpectedEOF}, true},
		{"connection lost under a handler error", &connLostError{err: byHandler(errors.New("x"))}, true},
		{"EOF from the handler's own decoding", byHandler(io.ErrUnexpectedEOF), false},
		{"connect error", fmt.Errorf("beginning: %w", &pgconn.ConnectError{Config: &pgconn.Config{}}), true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"network error returned by the handler", byHandler(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{"deadline", byHandler(context.DeadlineExceeded), true},
		{"Kafka request timed out", kerr.RequestTimedOut, true},
		{"Kafka leader moved", kerr.NotLeaderForPartition, true},
		{"Kafka record timeout", kgo.ErrRecordTimeout, true},
		{"Kafka retries exhausted", kgo.ErrRecordRetries, true},
		{"Kafka unknown topic", kerr.UnknownTopicOrPartition, false},
		{"Kafka topic denied", kerr.TopicAuthorizationFailed, false},
		{"Kafka message too large", kerr.MessageTooLarge, false},
		{"handler refusal", byHandler(errors.New("business rule refused it")), false},
		{"handler panic", byHandler(errors.New("handler panicked: boom")), false},
		{"no key", &keyError{err: errors.New("no id header")}, false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s: transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
