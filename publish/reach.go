package publish

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/lib/field"
)

// Reachability follows whether Kafka answers, from franz-go's hooks on
// every client it is added to (Hooks, in Config.Opts): it counts the dials
// and requests that failed, and knows since when none has succeeded. A
// wrong Brokers shows as a rising count and a growing time, where the
// producer itself only retries (it never fails a record for that).
//
// A dial counts as a success once the broker answered its ApiVersions
// request (franz-go's connection set-up), a request once its response was
// read. What the client's own closing or a canceled context ends is
// neither. Safe for concurrent use.
type Reachability struct {
	brokers string
	names   field.Names
	log     *slog.Logger

	errors atomic.Uint64
	since  atomic.Int64 // unix nanoseconds of the first failure after the last success; 0 after a success
	// wrongPeer is the last broker address that answered in something
	// other than Kafka's protocol, and what it speaks (nil: none since
	// the last success).
	wrongPeer atomic.Pointer[peerFault]
}

// peerFault is an address that does not speak what the client does.
type peerFault struct{ addr, what string }

// NewReachability returns the tracker for a client of brokers.
// names renders the client's settings its messages name (Config.Names).
func NewReachability(brokers []string, names field.Names, log *slog.Logger) *Reachability {
	return &Reachability{brokers: strings.Join(brokers, ","), names: names, log: log}
}

// Hooks is the client option that feeds r; add it to Config.Opts.
func (r *Reachability) Hooks() kgo.Opt { return kgo.WithHooks(reachHooks{r}) }

// ConnectionErrors counts the dials and requests to Kafka that failed.
func (r *Reachability) ConnectionErrors() uint64 { return r.errors.Load() }

// UnreachableSince returns when the first dial or request failed after the
// last one that succeeded; zero while the last one succeeded, or before
// any was made.
func (r *Reachability) UnreachableSince() time.Time {
	if ns := r.since.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// observeBroker is observe for a dial or request to the broker at addr,
// keeping the address when the peer does not speak Kafka.
func (r *Reachability) observeBroker(addr string, err error) {
	if what, ok := wrongProtocol(err, r.names); ok {
		r.wrongPeer.Store(&peerFault{addr: addr, what: what})
	}
	r.observe(err)
}

func (r *Reachability) observe(err error) {
	switch {
	case err == nil:
		r.since.Store(0)
		r.wrongPeer.Store(nil)
	case errors.Is(err, context.Canceled), errors.Is(err, net.ErrClosed), errors.Is(err, kgo.ErrClientClosed):
		// Ended by outboxd (a stop, a check given up), not by Kafka.
	default:
		r.errors.Add(1)
		r.since.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// reachHooks keeps the hook methods off Reachability's API.
type reachHooks struct{ r *Reachability }

var (
	_ kgo.HookBrokerConnect = reachHooks{}
	_ kgo.HookBrokerE2E     = reachHooks{}
)

func (h reachHooks) OnBrokerConnect(m kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	h.r.observeBroker(brokerAddr(m), err)
}

func (h reachHooks) OnBrokerE2E(m kgo.BrokerMetadata, _ int16, e2e kgo.BrokerE2E) {
	h.r.observeBroker(brokerAddr(m), e2e.Err())
}

func brokerAddr(m kgo.BrokerMetadata) string {
	return net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port)))
}

// wrongProtocol says what a peer speaks when err shows it does not speak
// what the client does: franz-go reads the first four bytes of any
// answer as a Kafka response's size, and a size past what a broker sends
// is another protocol (its text names a TLS alert or HTTP when it sees
// one); a TLS client reading a plaintext answer gets a record header
// error.
func wrongProtocol(err error, n field.Names) (string, bool) {
	if err == nil {
		return "", false
	}
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return "does not speak TLS: " + n.Of("TLS.Enabled") + " is on, and this is a plaintext listener (or not Kafka at all)", true
	}
	msg := err.Error()
	switch {
	case !strings.Contains(msg, "invalid large response size"):
		return "", false
	case strings.Contains(msg, "tls alert"):
		return "speaks TLS: turn " + n.Of("TLS.Enabled") + " on (with " + n.Of("TLS.CAFile") + " when its certificate is not from a public authority), or use its plaintext listener", true
	case strings.Contains(msg, "'HTTP'"):
		return "speaks HTTP, not Kafka: is the port the broker's?", true
	}
	return "does not speak Kafka (its answer is no Kafka response): is the port the broker's?", true
}

// explain names the broker that does not speak Kafka in err, when one
// answered so since the last success.
func (r *Reachability) explain(err error) error {
	if f := r.wrongPeer.Load(); f != nil {
		return fmt.Errorf("the peer at %s %s: %w", f.addr, f.what, err)
	}
	return err
}

// Timing of CheckAtStart.
const (
	startCheckTimeout = 10 * time.Second // one ping (a metadata request)
	startCheckFirst   = time.Second      // the first retry; each next one waits longer
	startCheckMax     = 30 * time.Second // the longest wait between two
)

// CheckAtStart pings Kafka (ping: a metadata request, Producer.Ping or
// TxnProducer.Ping) with a bounded timeout. When Kafka does not answer it
// logs a Warn naming the brokers and the error and pings again with
// backoff until Kafka answers, then logs at Info, and returns: the
// pipeline runs meanwhile, its records wait for Kafka (nothing is lost,
// the slot is not confirmed past them). It returns nil, also when ctx
// ends first; run it in the errgroup beside the pipeline.
func (r *Reachability) CheckAtStart(ctx context.Context, ping func(context.Context) error) error {
	start := time.Now()
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(startCheckFirst),
		backoff.WithMaxInterval(startCheckMax), backoff.WithMaxElapsedTime(0))
	for failed := false; ; failed = true {
		pctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
		err := ping(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil && failed:
			r.log.Info("Kafka reachable; the records waiting for it go out now", "brokers", r.brokers, "after", time.Since(start).Round(time.Millisecond))
			return nil
		case err == nil:
			r.log.Debug("Kafka reachable", "brokers", r.brokers)
			return nil
		}
		wait := bo.NextBackOff()
		err = r.explain(err)
		if !failed {
			r.log.Warn("Kafka unreachable at start: streaming goes on and records wait until Kafka answers (nothing is lost); checking again in the background",
				"brokers", r.brokers, "err", err, "retry_in", wait.Round(time.Millisecond))
		} else {
			r.log.Debug("Kafka still unreachable", "brokers", r.brokers, "err", err, "retry_in", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
