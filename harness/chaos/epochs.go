package chaos

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Epochs: with Kafka's transaction protocol version 2 every commit bumps
// the producer epoch, and after 32,767 commits on one transactional id the
// coordinator hands it a new producer id. A run with
// Options.MinKafkaTransactions counts the Kafka transactions the
// publishers committed (their progress records, read back with
// read_committed) and keeps the lines where outboxd logged its producer id,
// so that the report shows the id and epoch before and after the change.

// epochKeep is the longest epoch that still fits: the change comes after it.
const epochKeep = 32767

// producerLog keeps, from the publishers' logs, the lines naming a
// producer id.
type producerLog struct {
	next io.Writer // nil: dropped
	mu   sync.Mutex
	kept []string
}

func (l *producerLog) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("producer_id=")) {
		l.mu.Lock()
		l.kept = append(l.kept, strings.TrimSpace(string(p)))
		l.mu.Unlock()
	}
	if l.next != nil {
		return l.next.Write(p)
	}
	return len(p), nil
}

func (l *producerLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.kept...)
}

// countKafkaTransactions counts the committed progress records of the
// run's slot: one per Kafka transaction.
func countKafkaTransactions(ctx context.Context, pgURL string, brokers []string) (int, error) {
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return 0, err
	}
	var sys string
	err = conn.QueryRow(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&sys)
	conn.Close(context.Background())
	if err != nil {
		return 0, fmt.Errorf("reading the system identifier: %w", err)
	}
	prefix := []byte(slotName + "@" + sys + "/")
	const topic = "outboxd.progress"
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("listing the last stable offsets of %s: %w", topic, err)
	}
	n := 0
	err = readToEnd(ctx, cl, topic, ends, func(r *kgo.Record) error {
		if bytes.HasPrefix(r.Key, prefix) {
			n++
		}
		return nil
	})
	return n, err
}

// checkEpochs adds to rep what the epochs part of a run found wrong: too
// few Kafka transactions, or past the last epoch no new producer id.
func checkEpochs(rep *Report, want int) {
	if rep.KafkaTransactions < want {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d Kafka transactions committed on the transactional id, want at least %d", rep.KafkaTransactions, want))
	}
	changed := false
	for _, l := range rep.ProducerIDLines {
		changed = changed || strings.Contains(l, "new producer id")
	}
	if rep.KafkaTransactions > epochKeep && !changed {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d Kafka transactions and no new producer id logged: the epoch should have run out after %d", rep.KafkaTransactions, epochKeep))
	}
}
