package publish_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/publish"
)

// closedAddr is an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestReachabilityCountsFailedDials (issue 37, item 19: a wrong broker
// counted 0 connection errors): every failed dial of a client with the
// hooks counts, the time it started failing stays until a request
// succeeds, and a success clears it.
func TestReachabilityCountsFailedDials(t *testing.T) {
	t.Parallel()
	bad := closedAddr(t)
	reach := publish.NewReachability([]string{bad}, field.Names{}, quiet())
	p, err := publish.New(publish.Config{Brokers: []string{bad}, Opts: []kgo.Opt{reach.Hooks()}}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if n, since := reach.ConnectionErrors(), reach.UnreachableSince(); n != 0 || !since.IsZero() {
		t.Fatalf("before any dial: %d errors, unreachable since %v; want 0 and zero", n, since)
	}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := p.Ping(ctx)
		cancel()
		if err == nil {
			t.Fatalf("Ping of %s succeeded", bad)
		}
		if n := reach.ConnectionErrors(); n < uint64(i+1) {
			t.Errorf("after %d failed pings: %d connection errors, want at least %d", i+1, n, i+1)
		}
	}
	since := reach.UnreachableSince()
	if since.IsZero() {
		t.Fatal("UnreachableSince is zero after failed dials")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	_ = p.Ping(ctx)
	cancel()
	if got := reach.UnreachableSince(); !got.Equal(since) {
		t.Errorf("UnreachableSince moved from %v to %v on another failure, want the first failure's", since, got)
	}

	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	good, err := publish.New(publish.Config{Brokers: c.ListenAddrs(), Opts: []kgo.Opt{reach.Hooks()}}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if err := good.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := reach.UnreachableSince(); !got.IsZero() {
		t.Errorf("UnreachableSince = %v after a request succeeded, want zero", got)
	}
}

// TestCheckAtStartWarnsThenInforms: a failed check at start is a Warn
// naming the brokers and the error, the check goes on in the background,
// and its success is an Info.
func TestCheckAtStartWarnsThenInforms(t *testing.T) {
	t.Parallel()
	var buf testenv.SyncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	reach := publish.NewReachability([]string{"kafka-a:9092", "kafka-b:9092"}, field.Names{}, log)
	pings := 0
	ping := func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("ping without a deadline")
		}
		if pings++; pings < 3 {
			return errors.New("reaching Kafka: connection refused")
		}
		return nil
	}
	if err := reach.CheckAtStart(t.Context(), ping); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if pings != 3 {
		t.Errorf("%d pings, want 3 (two failed, then one succeeded)", pings)
	}
	for _, want := range []string{
		`level=WARN msg="Kafka unreachable at start`,
		`brokers=kafka-a:9092,kafka-b:9092 err="reaching Kafka: connection refused"`,
		`level=INFO msg="Kafka reachable`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d Warn lines, want 1 (the retries are at Debug):\n%s", n, out)
	}

	// A context ending while Kafka is down ends the check without an error.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := reach.CheckAtStart(ctx, func(context.Context) error { return errors.New("down") }); err != nil {
		t.Errorf("CheckAtStart after its context ended = %v, want nil", err)
	}
}

// answering listens on a local port and answers every connection's first
// bytes with reply, then closes it.
func answering(t *testing.T, reply []byte) string {
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
			go func() {
				defer c.Close()
				buf := make([]byte, 512)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(buf); err == nil {
					_, _ = c.Write(reply)
				}
			}()
		}
	}()
	return l.Addr().String()
}

// Issue 49, item 27: --brokers pointing at a port that is not Kafka's
// said only "response exceeds BrokerMaxReadBytes". The check at start
// says what the peer speaks and names its address.
func TestCheckAtStartNamesAPeerThatDoesNotSpeakKafka(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		reply []byte
		tls   bool // the client speaks TLS
		want  string
	}{
		// PostgreSQL answers an unknown start-up packet with an error
		// message ('E').
		{name: "another service", reply: append([]byte("E\x00\x00\x00\x54SFATAL"), make([]byte, 80)...), want: "does not speak Kafka"},
		{name: "HTTP", reply: []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), want: "speaks HTTP"},
		// A TLS listener answers plaintext with an alert record.
		{name: "TLS, the client plaintext", reply: []byte{21, 3, 3, 0, 2, 2, 10}, want: "speaks TLS: turn --kafka-tls on (with --kafka-tls-ca-file"},
		{name: "plaintext, the client TLS", reply: []byte("E\x00\x00\x00\x54SFATAL plaintext"), tls: true, want: "does not speak TLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := answering(t, tt.reply)
			var buf testenv.SyncBuffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			// The settings as run's flags name them.
			flags := field.Flags(func(path string) string {
				return map[string]string{"TLS.Enabled": "kafka-tls", "TLS.CAFile": "kafka-tls-ca-file"}[path]
			})
			reach := publish.NewReachability([]string{addr}, flags, log)
			cfg := publish.Config{Brokers: []string{addr}, Opts: []kgo.Opt{reach.Hooks()}}
			cfg.TLS.InsecureSkipVerify = tt.tls // a test peer
			p, err := publish.New(cfg, quiet())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- reach.CheckAtStart(ctx, p.Ping) }()
			out := ""
			for deadline := time.Now().Add(time.Minute); !strings.Contains(out, "Kafka unreachable") && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				out = buf.String()
			}
			cancel()
			<-done
			if want := "the peer at " + addr + " " + tt.want; !strings.Contains(out, want) {
				t.Fatalf("the check's warning lacks %q:\n%s", want, out)
			}
		})
	}
}
