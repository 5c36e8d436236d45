package publish

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Reachability follows whether Kafka answers, from franz-go's hooks on
// every client it is added to (Hooks, in Config.Opts): it counts the dials
// and requests that failed, and knows since when none has succeeded. A
// wrong --brokers shows as a rising count and a growing time, where the
// producer itself only retries (it never fails a record for that).
//
// A dial counts as a success once the broker answered its ApiVersions
// request (franz-go's connection set-up), a request once its response was
// read. What the client's own closing or a canceled context ends is
// neither. Safe for concurrent use.
type Reachability struct {
	brokers string
	log     *slog.Logger

	errors atomic.Uint64
	since  atomic.Int64 // unix nanoseconds of the first failure after the last success; 0 after a success
}

// NewReachability returns the tracker for a client of brokers.
func NewReachability(brokers []string, log *slog.Logger) *Reachability {
	return &Reachability{brokers: strings.Join(brokers, ","), log: log}
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

func (r *Reachability) observe(err error) {
	switch {
	case err == nil:
		r.since.Store(0)
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

func (h reachHooks) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	h.r.observe(err)
}

func (h reachHooks) OnBrokerE2E(_ kgo.BrokerMetadata, _ int16, e2e kgo.BrokerE2E) {
	h.r.observe(e2e.Err())
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
