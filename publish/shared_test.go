package publish_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/publish"
)

// Producers of one key publish through one client, those of another key
// through another; a Producer's Close lets go of the client, which closes
// with the last, while the others go on publishing.
func TestPoolSharesOneClientPerKey(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := publish.Config{Brokers: c.ListenAddrs()}
	pool := publish.NewPool(quiet())
	a, reachA, err := pool.Producer("k1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, reachB, err := pool.Producer("k1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := pool.Producer("k2", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := pool.Clients(); n != 2 {
		t.Fatalf("three Producers of two keys hold %d clients, want 2", n)
	}
	if reachA != reachB {
		t.Error("two Producers of one client got different Reachabilities")
	}
	for name, p := range map[string]*publish.Producer{"a": a, "b": b, "other": other} {
		if err := publishOne(t, p, outbox.Event{Topic: "t", Value: []byte(name)}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	a.Close()
	a.Close() // twice is harmless
	if err := publishOne(t, b, outbox.Event{Topic: "t", Value: []byte("b after a closed")}); err != nil {
		t.Fatalf("b after a closed: %v", err)
	}
	if n := pool.Clients(); n != 2 {
		t.Fatalf("after one of two Producers of k1 closed: %d clients, want 2", n)
	}
	b.Close()
	if n := pool.Clients(); n != 1 {
		t.Fatalf("after both Producers of k1 closed: %d clients, want 1", n)
	}
	again, _, err := pool.Producer("k1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := publishOne(t, again, outbox.Event{Topic: "t", Value: []byte("k1 again")}); err != nil {
		t.Fatalf("a Producer of k1 after its client closed: %v", err)
	}
	other.Close()
}

// A shared Producer's Abort waits for its own records rather than failing
// the client's: a sibling's records still in flight are not failed by it.
func TestSharedAbortLeavesTheSiblingsRecordsAlone(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Hold every produce request until released: records stay in flight.
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open() // before the cluster closes, should the test stop early
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		<-release
		return nil, nil, false
	})
	pool := publish.NewPool(quiet())
	a, _, err := pool.Producer("k", publish.Config{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _, err := pool.Producer("k", publish.Config{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bDone := make(chan error, 1)
	b.Publish(&outbox.Event{Topic: "t", Value: []byte("b")}, func(err error) { bDone <- err })
	aDone := make(chan error, 1)
	a.Publish(&outbox.Event{Topic: "t", Value: []byte("a")}, func(err error) { aDone <- err })

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := a.Abort(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Abort with a's record held in flight = %v, want it to wait until ctx ends", err)
	}
	open()
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
