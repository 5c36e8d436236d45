package publish_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/publish"
)

// These tests run the exactly-once sink against kfake, which implements
// Kafka's transactions; the integration tests (cmd/outboxd) run it against
// the real broker under kill -9, restarts and takeovers.

func fakeCluster(t *testing.T, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// runTxn starts a TxnProducer for slot "s" on system "sys", timeline 1,
// and returns it with Run's result channel; it is stopped when the test
// ends.
func runTxn(t *testing.T, brokers []string, cfg publish.TxnConfig) (*publish.TxnProducer, <-chan error) {
	t.Helper()
	return runTxnOn(t, brokers, cfg, 1)
}

func runTxnOn(t *testing.T, brokers []string, cfg publish.TxnConfig, timeline int32) (*publish.TxnProducer, <-chan error) {
	t.Helper()
	return runTxnAt(t, brokers, cfg, publish.Server{SystemID: "sys", Timeline: timeline})
}

// runTxnAt is runTxn on the server srv.
func runTxnAt(t *testing.T, brokers []string, cfg publish.TxnConfig, srv publish.Server) (*publish.TxnProducer, <-chan error) {
	t.Helper()
	cfg.Interval = 20 * time.Millisecond
	p, err := publish.NewTxn(cfg, publish.Config{Brokers: brokers}, "s",
		func(context.Context) (publish.Server, error) { return srv, nil }, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); res <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); p.Close() })
	return p, res
}

func txnEvent(id int64, topic string, lsn outbox.LSN, index int) outbox.Event {
	return outbox.Event{Topic: topic, Key: []byte("k"), Value: []byte("v" + strconv.FormatInt(id, 10)),
		Headers: []outbox.Header{{Key: "id", Value: []byte(strconv.FormatInt(id, 10))}}, CommitLSN: lsn, Index: index}
}

// publishAll publishes evs and returns each one's done result.
func publishAll(t *testing.T, p *publish.TxnProducer, evs ...outbox.Event) []error {
	t.Helper()
	dones := make([]chan error, len(evs))
	for i := range evs {
		dones[i] = make(chan error, 1)
		p.Publish(&evs[i], func(err error) { dones[i] <- err })
	}
	errs := make([]error, len(evs))
	for i, d := range dones {
		select {
		case errs[i] = <-d:
		case <-time.After(30 * time.Second):
			t.Fatalf("event %s: done was never called", evs[i].ID())
		}
	}
	return errs
}

// committedIDs reads topic with read_committed isolation.
func committedIDs(t *testing.T, brokers []string, topic string, want int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var ids []string
	for len(ids) < want {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		fs := cl.PollFetches(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { ids = append(ids, string(r.Value)) })
	}
	// Anything more would show within another short poll.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { ids = append(ids, string(r.Value)) })
	return ids
}

func TestTxnProducerResumesAfterTheLastCommittedPosition(t *testing.T) {
	t.Parallel()
	brokers := fakeCluster(t, "t")
	first := []outbox.Event{txnEvent(1, "t", 0x100, 0), txnEvent(2, "t", 0x100, 1), txnEvent(3, "t", 0x200, 0)}
	p1, _ := runTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"})
	for i, err := range publishAll(t, p1, first...) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	// A second process (or a restart) gets the same events again, as a
	// slot confirmed behind the progress topic sends them, and one more.
	p2, _ := runTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"})
	again := append(first[1:], txnEvent(4, "t", 0x300, 0))
	for i, err := range publishAll(t, p2, again...) {
		if err != nil {
			t.Fatalf("event %d again: %v", i, err)
		}
	}
	if st := p2.Stats(); st.Skipped != 2 || st.Committed == 0 {
		t.Errorf("second producer's stats %+v, want 2 skipped and a commit", st)
	}
	got := committedIDs(t, brokers, "t", 4)
	if want := []string{"v1", "v2", "v3", "v4"}; !equal(got, want) {
		t.Errorf("read_committed consumer saw %v, want %v: each event exactly once", got, want)
	}
}

// Regression: progress was keyed by slot and system identifier only. A
// promoted standby or a restored backup keeps the identifier but starts a
// new timeline whose LSNs can be at or below the old timeline's progress:
// its new rows were skipped as already published, and lost.
func TestTxnProducerNewTimelineSkipsNothing(t *testing.T) {
	t.Parallel()
	brokers := fakeCluster(t, "t")
	p1, _ := runTxnOn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"}, 1)
	if err := publishAll(t, p1, txnEvent(1, "t", 0x500, 0))[0]; err != nil {
		t.Fatal(err)
	}
	// Timeline 2 forked at 0/480: its own commits come at lower LSNs.
	p2, _ := runTxnOn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"}, 2)
	for i, err := range publishAll(t, p2, txnEvent(2, "t", 0x490, 0), txnEvent(3, "t", 0x500, 0)) {
		if err != nil {
			t.Fatalf("event %d: %v", i+2, err)
		}
	}
	if st := p2.Stats(); st.Skipped != 0 {
		t.Errorf("the new timeline's producer skipped %d events: rows committed after a failover would be lost", st.Skipped)
	}
	if got, want := committedIDs(t, brokers, "t", 3), []string{"v1", "v2", "v3"}; !equal(got, want) {
		t.Errorf("read_committed consumer saw %v, want %v", got, want)
	}
}

func TestTxnProducerFencedByItsSuccessor(t *testing.T) {
	t.Parallel()
	brokers := fakeCluster(t, "t")
	zombie, zres := runTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"})
	if err := publishAll(t, zombie, txnEvent(1, "t", 0x100, 0))[0]; err != nil {
		t.Fatal(err)
	}
	successor, _ := runTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"})
	if err := publishAll(t, successor, txnEvent(2, "t", 0x200, 0))[0]; err != nil {
		t.Fatal(err)
	}
	err := publishAll(t, zombie, txnEvent(3, "t", 0x300, 0))[0]
	if !errors.Is(err, outbox.ErrTransactionAborted) {
		t.Errorf("the fenced producer's record: %v, want it failed with its transaction", err)
	}
	select {
	case err := <-zres:
		if !errors.Is(err, publish.ErrFenced) {
			t.Errorf("fenced producer's Run = %v, want ErrFenced", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fenced producer kept running")
	}
	if got, want := committedIDs(t, brokers, "t", 2), []string{"v1", "v2"}; !equal(got, want) {
		t.Errorf("read_committed consumer saw %v, want %v: nothing of the fenced producer after the takeover", got, want)
	}
}

func TestTxnProducerRecordRefusedAbortsItsTransaction(t *testing.T) {
	t.Parallel()
	brokers := fakeCluster(t, "t")
	p, res := runTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"})
	// "missing" does not exist and the producer may not create it: Kafka
	// refuses that record for good.
	errs := publishAll(t, p, txnEvent(1, "t", 0x100, 0), txnEvent(2, "missing", 0x100, 1), txnEvent(3, "t", 0x100, 2))
	for i, err := range errs {
		if !errors.Is(err, outbox.ErrTransactionAborted) {
			t.Errorf("event %d: %v, want it failed with its aborted transaction", i+1, err)
		}
	}
	select {
	case err := <-res:
		if !errors.Is(err, outbox.ErrTransactionAborted) {
			t.Errorf("Run = %v, want the aborted transaction", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on after a record was refused for good")
	}
	if got := committedIDs(t, brokers, "t", 1); len(got) != 0 {
		t.Errorf("read_committed consumer saw %v of the aborted transaction", got)
	}
}

func TestTxnProducerRefusesAnUncompactedProgressTopic(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"delete", "compact,delete"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			brokers := fakeCluster(t, "t")
			adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer adm.Close()
			if _, err := kadm.NewClient(adm).CreateTopic(t.Context(), 1, 1, map[string]*string{"cleanup.policy": &policy}, "progress"); err != nil {
				t.Fatal(err)
			}
			p, res := runTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"})
			if err := publishAll(t, p, txnEvent(1, "t", 0x100, 0))[0]; err == nil {
				t.Fatal("published with a progress topic that deletes by age")
			}
			select {
			case err := <-res:
				if err == nil || !strings.Contains(err.Error(), "cleanup.policy="+policy) {
					t.Errorf("Run = %v, want an error naming the topic's cleanup.policy", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Run went on with a progress topic that deletes by age")
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Regression: a transaction took every record queued when it was filled,
// however many: a backlog (after a restart, or a burst) went into one
// Kafka transaction far above MaxRecords.
func TestTxnProducerKeepsTransactionsWithinMaxRecords(t *testing.T) {
	t.Parallel()
	brokers := fakeCluster(t, "t")
	cfg := publish.TxnConfig{ProgressTopic: "progress", MaxRecords: 3}
	p, _ := runTxn(t, brokers, cfg)
	var evs []outbox.Event
	for i := range 10 {
		evs = append(evs, txnEvent(int64(i+1), "t", outbox.LSN(0x100*(i/4+1)), i%4))
	}
	for i, err := range publishAll(t, p, evs...) {
		if err != nil {
			t.Fatalf("event %d: %v", i+1, err)
		}
	}
	if got := p.Stats().Committed; got < 4 {
		t.Errorf("10 records in %d Kafka transactions of at most 3 records; want at least 4", got)
	}
	if got := committedIDs(t, brokers, "t", 10); len(got) != 10 {
		t.Errorf("committed %v", got)
	}
}

// Kafka refusing every transaction (INVALID_TXN_STATE that lasts) is not
// retried without end: after a few new transactions the producer stops,
// and every record fails, none published.
func TestTxnProducerStopsWhenKafkaRefusesEveryTransaction(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Err: kerr.InvalidTxnState, Count: -1})
	p, res := runTxn(t, c.ListenAddrs(), publish.TxnConfig{ProgressTopic: "progress"})
	errs := publishAll(t, p, txnEvent(1, "t", 0x100, 0), txnEvent(2, "t", 0x100, 1))
	for i, err := range errs {
		if !errors.Is(err, outbox.ErrTransactionAborted) || !errors.Is(err, kerr.InvalidTxnState) {
			t.Errorf("event %d: %v, want an aborted transaction refused with INVALID_TXN_STATE", i+1, err)
		}
	}
	select {
	case err := <-res:
		if !errors.Is(err, kerr.InvalidTxnState) {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not stop")
	}
}
