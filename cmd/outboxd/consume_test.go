package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/idempotent"
)

// The replay-twice test of issue 16, standing: outboxd publishes a batch
// with a kill -9 in the middle (so Kafka holds redeliveries), a consumer
// built with package idempotent writes it into a business table; then the
// group is reset to the beginning and everything is consumed again. The
// business table must be unchanged: same rows, same contents.
func TestReplayTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := newWorld(t)
	ctx := t.Context()
	if _, err := w.pool.Exec(ctx, `CREATE TABLE shipments (outbox_id bigint NOT NULL, payload jsonb NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	p := w.start(t, "--max-in-flight-records", "2000")
	written := make(chan []int64, 1)
	go func() { ids, _ := w.tryWrite(context.Background(), 2000, 0); written <- ids }()
	waitFor(t, time.Minute, "publishing under way", func() bool { return strings.Contains(p.log(), "msg=streaming") })
	time.Sleep(300 * time.Millisecond)
	p.kill(t)
	ids := <-written
	p2 := w.start(t)

	group := testenv.Name(t, "group")
	consume := func() (records, rows int, sum string) {
		t.Helper()
		reg := prometheus.NewRegistry()
		c, err := idempotent.New(ctx, idempotent.Config{Brokers: strings.Split(w.brokers, ","), Group: group, Topics: []string{w.topic}, Metrics: reg,
			BatchSize: 100, Handler: func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
				id, _ := idempotent.IDHeader(r)
				_, err := tx.Exec(ctx, `INSERT INTO shipments (outbox_id, payload) VALUES ($1, $2)`, id, string(r.Value))
				return err
			}}, w.pool)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		total := topicRecords(t, w)
		waitFor(t, 2*time.Minute, "every record in the topic consumed", func() bool {
			return testenv.CounterValue(t, reg, "outboxd_consumer_processed_total")+testenv.CounterValue(t, reg, "outboxd_consumer_duplicates_total") >= float64(total)
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := w.pool.QueryRow(ctx, `SELECT count(*), md5(coalesce(string_agg(outbox_id || ':' || payload::text, ',' ORDER BY outbox_id), '')) FROM shipments`).Scan(&rows, &sum); err != nil {
			t.Fatal(err)
		}
		return total, rows, sum
	}
	_, _ = w.consumeAll(t, ids, 2*time.Minute) // outboxd published everything
	records, rows, sum := consume()
	if rows != len(ids) {
		t.Fatalf("first pass: %d business rows, want one per outbox row (%d)", rows, len(ids))
	}
	// Back to the beginning, and everything again.
	adm := testenv.Admin(t, strings.Split(w.brokers, ","))
	starts, err := adm.ListStartOffsets(ctx, w.topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CommitOffsets(ctx, group, starts.Offsets()); err != nil {
		t.Fatal(err)
	}
	_, rows2, sum2 := consume()
	if rows2 != rows || sum2 != sum {
		t.Errorf("after replaying everything: %d business rows (checksum %s), want %d (%s) unchanged", rows2, sum2, rows, sum)
	}
	_ = p2.cmd.Process.Signal(syscall.SIGTERM)
	p2.wait(t, time.Minute)
	t.Logf("measured: %d outbox rows, %d records in Kafka (%d redelivered by the kill -9), %d business rows after each of two passes", len(ids), records, records-len(ids), rows)
}

// topicRecords is the number of records in the world's topic.
func topicRecords(t *testing.T, w *world) int {
	t.Helper()
	adm := testenv.Admin(t, strings.Split(w.brokers, ","))
	ends, err := adm.ListEndOffsets(t.Context(), w.topic)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ends.Each(func(o kadm.ListedOffset) { n += int(o.Offset) })
	return n
}

// outboxd processed-keys: maintenance from cron; bad flags are refused
// naming them.
func TestProcessedKeysCommand(t *testing.T) {
	t.Parallel()
	dbURL := testenv.Database(t)
	out, err := exec.Command(builtBinary, "processed-keys", "--database-url", dbURL, "--ttl", "1h", "--ahead", "0").CombinedOutput()
	if code := exitCode(err); code != exitUsage || !strings.Contains(string(out), "--ttl") || !strings.Contains(string(out), "--ahead") {
		t.Fatalf("bad flags: exit %d, want %d naming --ttl and --ahead:\n%s", code, exitUsage, out)
	}
	out, err = exec.Command(builtBinary, "processed-keys", "--database-url", dbURL, "--ahead", "2").CombinedOutput()
	if err != nil {
		t.Fatalf("processed-keys: %v\n%s", err, out)
	}
	today := time.Now().UTC().Format("20060102")
	if !strings.Contains(string(out), "processed_keys_p"+today) || !strings.Contains(string(out), "dropped: none") {
		t.Errorf("output lacks today's partition or the dropped line:\n%s", out)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
