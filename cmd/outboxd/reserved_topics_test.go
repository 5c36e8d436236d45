package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/cdc/readpace"
	"github.com/outboxd/outboxd/harness/testenv"
)

// Every pipeline of a file reserves every pipeline's progress and
// dead-letter topics (issue 49, item 5), not only its own.
func TestEachPipelineReservesEveryPipelinesOwnTopics(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pipelines.yaml")
	writeFile(t, path, `brokers: kafka:9092
pipelines:
  - name: a
    database-url: postgres://a@db/a
    slot: a
    delivery: exactly-once
    progress-topic: a.progress
  - name: b
    database-url: postgres://b@db/b
    slot: b
    dead-letter-topic: b.dead
  - name: c
    database-url: postgres://c@db/c
    slot: c
    delivery: exactly-once
`)
	f, err := loadPipelinesFile(path, nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	specs, err := fleetSpecs(f, processShared{linger: readpace.NewShared(), log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		for _, topic := range []string{"a.progress", "b.dead", "outboxd.progress"} {
			if !slices.Contains(s.Config.Stream.Columns.ReservedTopics, topic) {
				t.Errorf("pipeline %s reserves %v, not %s", s.Name, s.Config.Stream.Columns.ReservedTopics, topic)
			}
		}
	}
}

// TestOnePipelineCannotForgeAnothersProgress is issue 49, item 5: each
// pipeline of a file reserved only its own progress and dead-letter
// topics, so a row of exactly-once pipeline F could name exactly-once
// pipeline A's custom progress topic with A's progress key, and F's
// transactional producer wrote it there in a committed Kafka transaction,
// as A's progress reader trusts (before A's first own record; and with
// the transactional-id header, which F's rows may no longer carry,
// always): A's next start skipped the events before the forged position.
// On kfake: F stops at the row, naming the reserved topic, and A's
// progress topic holds only A's own records.
func TestOnePipelineCannotForgeAnothersProgress(t *testing.T) {
	t.Parallel()
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	brokers := strings.Join(k.ListenAddrs(), ",")
	a, f := newWorld(t), newWorld(t)
	for _, w := range []*world{a, f} {
		w.brokers, w.topic = brokers, "events"
	}
	// A row of f addressed to a's progress topic. (The default table's key
	// is a uuid, so it cannot take a's progress key; a table of the
	// application's own, or a message, can. The topic is what is refused.)
	if _, err := f.pool.Exec(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), 'a.progress', $1)`,
		`{"commit_lsn": "FFFFFFFF/0", "index": 0, "forged": true}`); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pipelines.yaml")
	writeFile(t, path, fmt.Sprintf(`brokers: %s
status-interval: 200ms
metrics-addr: %s
delivery: exactly-once
pipelines:
  - name: a
    database-url: %s
    slot: %s
    progress-topic: a.progress
  - name: f
    database-url: %s
    slot: %s
`, brokers, anyPort, a.url, a.slot, f.url, f.slot))
	p := startFile(t, path)
	ids := a.write(t, 3, 0)
	a.consumeAll(t, ids, time.Minute, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	testenv.Eventually(t, time.Minute, "f stopped at the row naming a's progress topic", func() bool {
		return strings.Contains(p.log(), `topic \"a.progress\" is reserved`) || strings.Contains(p.log(), `topic "a.progress" is reserved`)
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.ConsumeTopics("a.progress"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var progress int
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			progress++
			if strings.Contains(string(r.Value), "forged") {
				t.Errorf("a.progress holds the forged record %s (key %s)", r.Value, r.Key)
			}
		})
	}
	if progress == 0 {
		t.Error("a.progress holds no record: a committed nothing, and the test tested nothing")
	}
}
