package idempotent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
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
		{"connect error: refused", fmt.Errorf("beginning: %w", connectError(t, refusingAddr(t))), true},
		{"connect error: the server closed it", connectError(t, closingAddr(t)), true},
		// Regression (issue 37, review): anything implementing net.Error
		// was transient, so a handler returning a URL that does not parse
		// was retried for ever, holding its partition; so was its own
		// deadline, and a TLS certificate that does not verify.
		{"URL that does not parse, from the handler", byHandler(&url.Error{Op: "parse", URL: "http://x/%zz", Err: url.EscapeError("%zz")}), false},
		{"malformed address", byHandler(&net.ParseError{Type: "CIDR address", Text: "nope"}), false},
		{"DNS: no such host", &net.DNSError{Err: "no such host", Name: "db", IsNotFound: true}, false},
		{"DNS: temporary", &net.DNSError{Err: "server misbehaving", Name: "db", IsTemporary: true}, true},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, true},
		// and database timeouts under load dead-lettered healthy records.
		{"lock timeout", pg("55P03"), true},
		{"statement timeout", byHandler(pg("57014")), true},
		{"disk full", pg("53100"), true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"network error returned by the handler", byHandler(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{"the handler's own deadline", byHandler(context.DeadlineExceeded), false},
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

// timeoutErr is a network error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// connectError is pgconn's error connecting to addr.
func connectError(t *testing.T, addr string) error {
	t.Helper()
	_, err := pgconn.Connect(t.Context(), "postgres://u@"+addr+"/db?sslmode=disable&connect_timeout=5")
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("connecting to %s: %v, want a *pgconn.ConnectError", addr, err)
	}
	return err
}

// refusingAddr is an address nothing listens on.
func refusingAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// closingAddr is an address whose server closes every connection at once.
func closingAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}
