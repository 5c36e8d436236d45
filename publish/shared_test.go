package publish_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

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
