package publish

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/outbox"
)

// heldPool is a Pool on a one-broker kfake cluster that holds every
// produce request until release is called (records stay in flight); the
// test's end releases them before the cluster closes.
func heldPool(t *testing.T) (pool *Pool, cfg Config, release func()) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	held := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release) // runs before c.Close
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		<-held
		return nil, nil, false
	})
	return NewPool(slog.New(slog.NewTextHandler(io.Discard, nil))), Config{Brokers: c.ListenAddrs()}, release
}

// producer is a Producer of pool for key k, closed at the test's end.
func producer(t *testing.T, pool *Pool, cfg Config) *Producer {
	t.Helper()
	p, _, err := pool.Producer("k", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// A shared Producer's Abort waits for its own records rather than failing
// the client's: a sibling's records still in flight are not failed by it.
func TestSharedAbortLeavesTheSiblingsRecordsAlone(t *testing.T) {
	t.Parallel()
	pool, cfg, release := heldPool(t)
	a, b := producer(t, pool, cfg), producer(t, pool, cfg)
	bDone := make(chan error, 1)
	b.Publish(&outbox.Event{Topic: "t", Value: []byte("b")}, func(err error) { bDone <- err })
	aDone := make(chan error, 1)
	a.Publish(&outbox.Event{Topic: "t", Value: []byte("a")}, func(err error) { aDone <- err })

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := a.Abort(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Abort with a's record held in flight = %v, want it to wait until ctx ends", err)
	}
	release()
	if err := <-bDone; err != nil {
		t.Errorf("b's record after a's Abort: %v, want it written", err)
	}
	if err := <-aDone; err != nil {
		t.Errorf("a's record: %v, want it written (a shared Producer cannot fail its own alone)", err)
	}
	if err := a.Abort(t.Context()); err != nil {
		t.Errorf("Abort with nothing in flight = %v", err)
	}
}

// Regression: a shared Producer's Abort waited for its records for as long
// as Kafka kept them (for ever, with a partition without a leader), so the
// pipeline that failed never got to its restart. It waits at most the
// pool's abortWait.
func TestSharedAbortWaitIsBounded(t *testing.T) {
	t.Parallel()
	pool, cfg, _ := heldPool(t)
	pool.abortWait = 100 * time.Millisecond
	p := producer(t, pool, cfg)
	p.Publish(&outbox.Event{Topic: "t", Value: []byte("held")}, func(error) {})
	if err := p.Abort(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Abort with a record held for ever = %v, want it to give up after abortWait", err)
	}
}
