package publish_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/publish"
)

// logLine returns the first line of logs containing every one of parts.
func logLine(logs *testenv.SyncBuffer, parts ...string) (string, bool) {
	for _, line := range strings.Split(logs.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return line, true
		}
	}
	return "", false
}

// startTxn runs a TxnProducer for slot "s" on system "sys", timeline 1,
// logging to logs, until the test ends.
func startTxn(t *testing.T, brokers []string, cfg publish.TxnConfig, logs *testenv.SyncBuffer) *publish.TxnProducer {
	t.Helper()
	p, err := publish.NewTxn(cfg, publish.Config{Brokers: brokers}, "s",
		func(context.Context) (publish.Server, error) {
			return publish.Server{SystemID: "sys", Timeline: 1}, nil
		},
		slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped; p.Close() })
	return p
}

// openTransaction opens a Kafka transaction on topic from a producer of
// its own (with a transaction timeout far past the test's) and leaves it
// open: a hanging transaction, as far as anyone reading can tell. It
// returns a function that aborts it, as an operator would.
func openTransaction(t *testing.T, brokers []string, topic string) (abort func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("someone-else-"+topic),
		kgo.TransactionTimeout(10*time.Minute), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Key: []byte("not-outboxd"), Value: []byte("{}")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := cl.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
			t.Errorf("aborting the open transaction: %v", err)
		}
	}
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A transaction left open on the progress topic (a hanging transaction)
// holds the last stable offset, and with it the progress reader, behind
// it: outboxd says so, at its start and while it runs, with the command
// that lists and aborts it, and goes on once it is aborted.
func TestHangingTransactionsOnTheProgressTopicAreReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		whileUp   bool  // opened while outboxd runs, or before it starts
		lso, hwm  int64 // where the hang holds the partition
		firstDone bool  // the event published first commits before the hang is aborted
	}{
		{"at start", false, 0, 1, false},
		{"while running", true, 2, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			brokers := fakeCluster(t, "t")
			var abort func()
			if !tc.whileUp {
				createProgressTopic(t, brokers, "progress")
				abort = openTransaction(t, brokers, "progress")
			}
			var logs testenv.SyncBuffer
			p := startTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress", Interval: 20 * time.Millisecond, Timeout: time.Second}, &logs)

			first := make(chan error, 1)
			ev := txnEvent(1, "t", 0x100, 0)
			p.Publish(&ev, func(err error) { first <- err })
			if tc.whileUp {
				if err := <-first; err != nil {
					t.Fatal(err)
				}
				abort = openTransaction(t, brokers, "progress")
			}
			until(t, "the hanging transaction reported", func() bool {
				_, ok := logLine(&logs, "level=WARN", "hanging Kafka transaction", "topic=progress", "partition=0")
				return ok
			})
			line, _ := logLine(&logs, "level=WARN", "hanging Kafka transaction")
			for _, want := range []string{
				"last_stable_offset=" + itoa(tc.lso), "high_watermark=" + itoa(tc.hwm), "producer_id=",
				"find-hanging --topic progress --partition 0",
				"abort --topic progress --partition 0 --start-offset " + itoa(tc.lso),
			} {
				if !strings.Contains(line, want) {
					t.Errorf("the warning lacks %q: %s", want, line)
				}
			}
			if p.Stats().HangingSince.IsZero() {
				t.Error("Stats().HangingSince is zero while a transaction hangs")
			}
			if !tc.firstDone {
				select {
				case err := <-first:
					t.Fatalf("the event was done (%v) while the progress could not be read", err)
				default:
				}
			}

			abort()
			if !tc.firstDone {
				if err := <-first; err != nil {
					t.Fatalf("the event after the hang was aborted: %v", err)
				}
			}
			second := txnEvent(2, "t", 0x200, 0)
			if errs := publishAll(t, p, second); errs[0] != nil {
				t.Fatal(errs[0])
			}
			until(t, "the hang's end reported", func() bool {
				_, ok := logLine(&logs, "level=INFO", "hanging Kafka transaction on the progress topic ended", "partition=0")
				return ok
			})
			if s := p.Stats().HangingSince; !s.IsZero() {
				t.Errorf("Stats().HangingSince = %v after the hang ended", s)
			}
			if got := committedIDs(t, brokers, "t", 2); strings.Join(got, ",") != "v1,v2" {
				t.Errorf("committed %v, want v1,v2", got)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
