package publish_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
)

// The default transactional id and progress key of runTxn's producer.
const (
	testTxnID       = "outboxd-s-sys"
	testProgressKey = "s@sys/1"
)

// writeProgress writes a progress-shaped record under testProgressKey
// claiming commit LSN lsn: in a committed transaction of txnID, or without
// a transaction when txnID is "". header, when not empty, is the value of
// the header naming the writer.
func writeProgress(t *testing.T, brokers []string, txnID, header string, lsn outbox.LSN) {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	if txnID != "" {
		opts = append(opts, kgo.TransactionalID(txnID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: "progress", Key: []byte(testProgressKey), Value: []byte(`{"commit_lsn":"` + lsn.String() + `","index":0}`)}
	if header != "" {
		rec.Headers = []kgo.RecordHeader{{Key: "outboxd-transactional-id", Value: []byte(header)}}
	}
	if txnID != "" {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if txnID != "" {
		if err := cl.EndTransaction(t.Context(), kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
}

// compactedProgressTopic creates the progress topic as the sink would.
func compactedProgressTopic(t *testing.T, brokers []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	compact := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, map[string]*string{"cleanup.policy": &compact}, "progress"); err != nil {
		t.Fatal(err)
	}
}

// Regression (issue 37): the progress reader trusted the last record with
// the slot's key, whoever wrote it. A record published there by another
// publisher (an at-least-once outboxd, a table-less message) with a high
// LSN made an exactly-once publisher skip, that is lose, every event up to
// it at its next start.
func TestProgressReaderTrustsOnlyOutboxdsTransactions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		forge       func(t *testing.T, brokers []string)
		wantSkipped uint64
		wantIDs     []string
	}{
		{
			name: "a record outside any transaction, with the header forged",
			forge: func(t *testing.T, brokers []string) {
				writeProgress(t, brokers, "", testTxnID, 0xFFFF)
			},
			wantIDs: []string{"v1", "v2"},
		},
		{
			name: "another transactional id's record",
			forge: func(t *testing.T, brokers []string) {
				writeProgress(t, brokers, "intruder", "intruder", 0xFFFF)
			},
			wantIDs: []string{"v1", "v2"},
		},
		{
			name: "a record without the header after outboxd's own",
			forge: func(t *testing.T, brokers []string) {
				writeProgress(t, brokers, testTxnID, testTxnID, 0x50)
				writeProgress(t, brokers, "intruder", "", 0xFFFF)
			},
			wantIDs: []string{"v1", "v2"},
		},
		{
			// The upgrade path: an outboxd from before the header wrote
			// progress up to event 1; it is still honoured.
			name: "an older outboxd's record without the header",
			forge: func(t *testing.T, brokers []string) {
				writeProgress(t, brokers, testTxnID, "", 0x100)
			},
			wantSkipped: 1,
			wantIDs:     []string{"v2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			brokers := fakeCluster(t, "t")
			compactedProgressTopic(t, brokers)
			tt.forge(t, brokers)
			p, _ := runTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"})
			for i, err := range publishAll(t, p, txnEvent(1, "t", 0x100, 0), txnEvent(2, "t", 0x200, 0)) {
				if err != nil {
					t.Fatalf("event %d: %v", i+1, err)
				}
			}
			if st := p.Stats(); st.Skipped != tt.wantSkipped {
				t.Errorf("skipped %d events as already published, want %d", st.Skipped, tt.wantSkipped)
			}
			if got := committedIDs(t, brokers, "t", len(tt.wantIDs)); !equal(got, tt.wantIDs) {
				t.Errorf("read_committed consumer saw %v, want %v", got, tt.wantIDs)
			}
		})
	}
}

// Regression (issue 37): the exactly-once sink, used without the decoder's
// check, published an event addressed to its own progress topic.
func TestTxnProducerRefusesAnEventForTheProgressTopic(t *testing.T) {
	t.Parallel()
	brokers := fakeCluster(t, "t")
	p, _ := runTxn(t, brokers, publish.TxnConfig{ProgressTopic: "progress"})
	err := publishAll(t, p, txnEvent(1, "progress", 0x100, 0))[0]
	var perr *publish.Error
	if !errors.As(err, &perr) || perr.ID != "1" || perr.Topic != "progress" {
		t.Fatalf("event for the progress topic: %v, want a *publish.Error naming outbox id 1 and the topic", err)
	}
}

// Regression (issue 37): pump.New took the exactly-once sink with a
// dead-letter topic; the sink then took each dead letter for a record it
// already held and reported it done unwritten.
func TestTxnProducerRefusesADeadLetterTopic(t *testing.T) {
	t.Parallel()
	p, err := publish.NewTxn(publish.TxnConfig{}, publish.Config{Brokers: []string{"127.0.0.1:1"}}, "s",
		func(context.Context) (publish.Server, error) {
			return publish.Server{SystemID: "sys", Timeline: 1}, nil
		}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := pump.New(pump.Config{DeadLetterTopic: "dlq"}, p, quiet()); err == nil || !strings.Contains(err.Error(), "dead-letter") {
		t.Errorf("pump.New with the exactly-once sink and a dead-letter topic = %v, want it refused", err)
	}
	if _, err := pump.New(pump.Config{}, p, quiet()); err != nil {
		t.Errorf("pump.New with the exactly-once sink = %v", err)
	}
}

// Regression (issue 37, review): after the server's storage was rolled back
// without a new timeline, the progress topic still held positions of the
// history the server lost under the same key, and the exactly-once sink
// skipped the rows the server committed anew below them: lost. Progress
// past the stream's WAL end is refused.
func TestTxnProducerRefusesProgressPastTheWALEnd(t *testing.T) {
	t.Parallel()
	brokers := fakeCluster(t, "t")
	p1, _ := runTxnAt(t, brokers, publish.TxnConfig{ProgressTopic: "progress"}, publish.Server{SystemID: "sys", Timeline: 1, WALEnd: 0x1000})
	if err := publishAll(t, p1, txnEvent(1, "t", 0x500, 0))[0]; err != nil {
		t.Fatal(err)
	}
	// The server came back from a copy whose WAL ends at 0/400.
	p2, res := runTxnAt(t, brokers, publish.TxnConfig{ProgressTopic: "progress"}, publish.Server{SystemID: "sys", Timeline: 1, WALEnd: 0x400})
	if err := publishAll(t, p2, txnEvent(2, "t", 0x450, 0))[0]; err == nil {
		t.Fatal("an event below the lost history's progress was reported done")
	}
	select {
	case err := <-res:
		if err == nil || !strings.Contains(err.Error(), "rolled back") || !strings.Contains(err.Error(), "0/500") {
			t.Errorf("Run = %v, want the refusal naming the progress and the rollback", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on with progress past the server's WAL end")
	}
	if st := p2.Stats(); st.Skipped != 0 {
		t.Errorf("skipped %d events as already published", st.Skipped)
	}
}
