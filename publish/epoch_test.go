package publish_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/publish"
)

// Under Kafka's transaction protocol version 2 every commit bumps the
// producer epoch; once it runs out the coordinator hands the transactional
// id a new producer id (Kafka had a bug there: KAFKA-18660 self-fenced
// producers). kfake does the same, so the exactly-once sink is taken past
// that point here, one event a transaction, and must go on without a
// restart and without losing or repeating an event. The real broker's
// run of the same: make chaos-epochs.
func TestTxnProducerOutlivesItsProducerEpoch(t *testing.T) {
	t.Parallel()
	brokers := fakeCluster(t, "t")
	var logs testenv.SyncBuffer
	p := startTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress", MaxRecords: 1, Interval: 30 * time.Second}, &logs)

	const n = math.MaxInt16 + 10 // commits: past the last epoch
	done := make(chan error, 1)
	for i := range n {
		ev := outbox.Event{Topic: "t", Value: []byte("v"), CommitLSN: outbox.LSN(0x100 + i), Headers: []outbox.Header{{Key: "id", Value: []byte(itoa(int64(i + 1)))}}}
		p.Publish(&ev, func(err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatalf("event %d: %v", i+1, err)
		}
	}
	if got := p.Stats().Committed; got != n {
		t.Errorf("%d Kafka transactions committed, want %d", got, n)
	}
	line, ok := logLine(&logs, "new producer id", "previous_producer_epoch=")
	if !ok {
		t.Fatalf("no new producer id logged after %d commits; log:\n%s", n, logs.String())
	}
	if !strings.Contains(line, "producer_epoch=0") {
		t.Errorf("the new producer id's epoch is not 0: %s", line)
	}
	t.Log(line)
	ids := committedIDs(t, brokers, "t", n)
	if len(ids) != n {
		t.Fatalf("%d records committed, want %d", len(ids), n)
	}
}
