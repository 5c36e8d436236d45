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

// Regression: a shared Producer's Abort waited for its records for as long
// as Kafka kept them (for ever, with a partition without a leader), so the
// pipeline that failed never got to its restart. It waits at most the
// pool's abortWait.
func TestSharedAbortWaitIsBounded(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		<-release
		return nil, nil, false
	})
	pool := NewPool(slog.New(slog.NewTextHandler(io.Discard, nil)))
	pool.abortWait = 100 * time.Millisecond
	p, _, err := pool.Producer("k", Config{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Publish(&outbox.Event{Topic: "t", Value: []byte("held")}, func(error) {})
	if err := p.Abort(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Abort with a record held for ever = %v, want it to give up after abortWait", err)
	}
}
