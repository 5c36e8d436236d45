package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
)

// Issue 51: a transaction left open on the progress topic by a producer
// that is not outboxd's (its transaction timeout far past outboxd's: to
// whoever reads, a hanging transaction) holds the topic's last stable
// offset. On the real broker outboxd says so: a Warn naming the
// partition, its offsets and the producer holding it, with the commands
// that list and abort it, and outboxd_kafka_hanging_transaction_seconds
// above 0; once the transaction is aborted, an Info and 0 again, and the
// rows written meanwhile are published once.
func TestAHangingTransactionOnTheProgressTopicIsReported(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := newWorld(t)
	p := w.start(t, eosArgs(t, w, "--transaction-timeout", "2s", "--metrics-addr", anyPort)...)
	addr := servedAt(t, p.log)
	want := w.write(t, 1, 0)
	waitFor(t, time.Minute, "the exactly-once producer ready (the progress topic exists)", func() bool {
		return strings.Contains(p.log(), "exactly-once producer ready")
	})

	progress := w.topic + ".progress"
	other, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(w.brokers, ",")...), kgo.TransactionalID(w.slot+"-not-outboxd"),
		kgo.TransactionTimeout(10*time.Minute), kgo.DefaultProduceTopic(progress))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(t.Context(), &kgo.Record{Key: []byte("not-outboxd"), Value: []byte("{}")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid, _, err := other.ProducerID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, w.write(t, 1, 100)...)

	waitFor(t, time.Minute, "the hanging transaction reported", func() bool {
		return strings.Contains(p.log(), "hanging Kafka transaction on the progress topic:")
	})
	var warn string
	for _, l := range strings.Split(p.log(), "\n") {
		if strings.Contains(l, "hanging Kafka transaction on the progress topic:") {
			warn = l
		}
	}
	for _, s := range []string{"level=WARN", "topic=" + progress, "partition=0", "producer_id=" + strconv.FormatInt(pid, 10),
		"find-hanging --topic " + progress + " --partition 0", "abort --topic " + progress + " --partition 0 --start-offset "} {
		if !strings.Contains(warn, s) {
			t.Errorf("the warning lacks %q: %s", s, warn)
		}
	}
	if _, body := get(addr, "/metrics"); metric(body, w.slot, "outboxd_kafka_hanging_transaction_seconds") <= 0 {
		t.Errorf("outboxd_kafka_hanging_transaction_seconds is not above 0 while a transaction hangs")
	}

	if err := other.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the hang's end reported", func() bool {
		return strings.Contains(p.log(), "hanging Kafka transaction on the progress topic ended")
	})
	if _, body := get(addr, "/metrics"); metric(body, w.slot, "outboxd_kafka_hanging_transaction_seconds") != 0 {
		t.Errorf("outboxd_kafka_hanging_transaction_seconds is not 0 after the hang ended")
	}
	requireExactlyOnce(t, w, want)
	p.stop(t)
}
