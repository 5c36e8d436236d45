package cdc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
)

// TestWalsenderTerminationResendsOnlyTheOpenTransaction pins the bug where
// a dropped replication connection re-sent everything in flight: the final
// status could not be sent, the next session started from the last status
// that had been (up to a status period old), and every transaction Kafka
// acknowledged since was published again (measured: 2,000-4,000 duplicates
// per termination with four writers). The next session now starts from
// what the pump confirmed after draining, so only the transaction that was
// open when the connection broke can repeat.
func TestWalsenderTerminationResendsOnlyTheOpenTransaction(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b := newBed(t, "", nil)
	r := b.start(cdc.Config{ReconnectMaxInterval: 200 * time.Millisecond, StatusInterval: 10 * time.Second})
	defer r.stop()
	ctx := t.Context()
	const maxRows, terminations = 20, 3
	var mu sync.Mutex
	var want []int64
	stop := make(chan struct{})
	var g errgroup.Group
	for w := range 4 {
		g.Go(func() error {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				rows := make([]row, 1+rng.IntN(maxRows))
				for i := range rows {
					rows[i] = row{agg: uuidFor(w*10 + i%3), topic: b.topic, payload: `{"pad": "` + strings.Repeat("x", 100) + `"}`}
				}
				ids, err := b.insert(ctx, rows, true, false)
				if err != nil {
					return err
				}
				mu.Lock()
				want = append(want, ids...)
				mu.Unlock()
			}
		})
	}
	for range terminations {
		time.Sleep(time.Second)
		testenv.Eventually(t, 30*time.Second, "walsender active", func() bool {
			var n int
			_ = b.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database() AND active_pid IS NOT NULL`, b.slot).Scan(&n)
			return n == 1
		})
	}
	time.Sleep(time.Second)
	close(stop)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	recs := b.consume().untilIDs(t, want, 2*time.Minute)
	recs = append(recs[:0:0], recs...)
	dups := len(recs) - len(want)
	t.Logf("measured: %d walsender terminations, %d rows in 1-%d row transactions from 4 writers: %d duplicates", terminations, len(want), maxRows, dups)
	if dups > terminations*maxRows {
		t.Errorf("%d duplicates after %d terminations: more than the open transaction (at most %d rows) each", dups, terminations, maxRows)
	}
}

// TestDeadLetterTopicTakesWhatCannotBePublished covers the way out of a
// record that could never be published (it used to wedge the slot until
// max_slot_wal_keep_size invalidated it): with --dead-letter-topic, every
// record Kafka refuses for good and every row that cannot become a record
// goes to that topic with headers saying why, the records after it are
// published, and the slot moves on. A record too large for the
// dead-letter topic too goes there as a reference without its value.
func TestDeadLetterTopicTakesWhatCannotBePublished(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	type badRow struct {
		name   string
		insert func(t *testing.T, b *bed) (topic string, id int64) // commits the bad row
		cause  string
		ref    bool // the dead-letter record is a reference without the value
	}
	var cases []badRow
	for _, rf := range refusals {
		cases = append(cases, badRow{name: rf.name, cause: rf.cause, ref: strings.Contains(rf.name, "before sending"),
			insert: func(t *testing.T, b *bed) (string, int64) {
				topic := rf.topic(t, b)
				ids, err := b.insert(t.Context(), []row{{agg: uuidFor(2), topic: topic, payload: rf.payload}}, true, false)
				if err != nil {
					t.Fatal(err)
				}
				return topic, ids[0]
			}})
	}
	cases = append(cases,
		badRow{name: "headers that are not an object", cause: "headers are a JSON array",
			insert: func(t *testing.T, b *bed) (string, int64) {
				var id int64
				if _, err := b.pool.Exec(t.Context(), `ALTER TABLE outbox DROP CONSTRAINT outboxd_headers_valid`); err != nil {
					t.Fatal(err)
				}
				if err := b.pool.QueryRow(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload, headers) VALUES ($1, $2, '{"n": 2}', '[1]') RETURNING id`, uuidFor(2), b.topic).Scan(&id); err != nil {
					t.Fatal(err)
				}
				return b.topic, id
			}},
		badRow{name: "table made unusable by ALTER TABLE", cause: `missing topic column "topic"`,
			insert: func(t *testing.T, b *bed) (string, int64) {
				var id int64
				if _, err := b.pool.Exec(t.Context(), `ALTER TABLE outbox DROP COLUMN topic`); err != nil {
					t.Fatal(err)
				}
				if err := b.pool.QueryRow(t.Context(), `INSERT INTO outbox (aggregate_id, payload) VALUES ($1, '{"n": 2}') RETURNING id`, uuidFor(2)).Scan(&id); err != nil {
					t.Fatal(err)
				}
				if _, err := b.pool.Exec(t.Context(), `ALTER TABLE outbox ADD COLUMN topic text`); err != nil {
					t.Fatal(err)
				}
				return "", id
			}},
	)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBed(t, "", nil)
			ctx := t.Context()
			dlq := testenv.CreateTopic(t, b.brokers, testenv.Name(t, "dlq"), 1)
			r := b.startWith(cdc.Config{}, pump.Config{DeadLetterTopic: dlq}, publish.Config{})
			defer r.stop()
			if _, err := b.insert(ctx, []row{{agg: uuidFor(1), topic: b.topic, payload: `{"n": 1}`}}, true, false); err != nil {
				t.Fatal(err)
			}
			topic, badID := tt.insert(t, b)
			after, err := b.insert(ctx, []row{{agg: uuidFor(3), topic: b.topic, payload: `{"n": 3}`}}, true, false)
			if err != nil {
				t.Fatal(err)
			}
			end := b.currentLSN(t)
			recs := b.consume().until(t, 2, time.Minute)
			if got := recordID(t, recs[len(recs)-1]); got != after[0] {
				t.Errorf("last record on the topic is outbox id %d, want %d (the row after the bad one)", got, after[0])
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			dead := (&consumer{cl: cl}).until(t, 1, time.Minute)[0]
			want := map[string]string{"id": fmt.Sprint(badID), "outboxd.dlq.outbox_id": fmt.Sprint(badID), "outboxd.dlq.topic": topic, "outboxd.dlq.table": "public.outbox"}
			for k, v := range want {
				if got, _ := header(dead, k); got != v {
					t.Errorf("dead-letter header %s = %q, want %q", k, got, v)
				}
			}
			if e, _ := header(dead, "outboxd.dlq.error"); !strings.Contains(e, tt.cause) {
				t.Errorf("dead-letter error header %q does not say %q", e, tt.cause)
			}
			if lsn, _ := header(dead, "outboxd.dlq.commit_lsn"); lsn == "" {
				t.Error("dead-letter record without its commit LSN")
			}
			if size, _ := header(dead, "outboxd.dlq.value_bytes"); (size != "") != tt.ref || tt.ref && dead.Value != nil {
				t.Errorf("dead-letter record: value %d bytes, value_bytes header %q; want a reference: %v", len(dead.Value), size, tt.ref)
			}
			testenv.Eventually(t, time.Minute, "the slot confirmed past the bad row", func() bool { return b.confirmed(t) >= end })
			if st := r.pump.Stats(); st.DeadLettered != 1 {
				t.Errorf("Stats.DeadLettered = %d, want 1", st.DeadLettered)
			}
		})
	}
}

// TestServerChangeDoesNotSkipCommits pins the bug where the position a
// process had confirmed was trusted across reconnects to another server (a
// promoted standby, a restored backup, another cluster behind the same
// address): its LSNs start lower, and every commit below the old position
// was skipped. The server is identified at every connect; on a change the
// session starts from the slot's own confirmed position.
func TestServerChangeDoesNotSkipCommits(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b, r, c := switchServer(t, cdc.Config{ReconnectMaxInterval: 200 * time.Millisecond})
	defer r.stop()
	if _, err := b.pool.Exec(t.Context(), `SELECT setval('outbox_id_seq', 1000)`); err != nil { // ids apart from the first server's
		t.Fatal(err)
	}
	ids2, err := b.insert(t.Context(), []row{{agg: uuidFor(2), topic: b.topic, payload: `{"server": 2}`}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	c.untilIDs(t, ids2, 2*time.Minute)
	if confirmed, cur := r.st.Stats().ConfirmedLSN, b.currentLSN(t); confirmed > cur {
		t.Errorf("confirmed %s on the second server, above its WAL end %s: the old position was carried over", confirmed, cur)
	}
}

// TestServerChangeStopsWhenAsked: with StopOnServerChange (the
// exactly-once mode, whose progress belongs to one timeline), a session on
// another server is a permanent error that names both servers.
func TestServerChangeStopsWhenAsked(t *testing.T) {
	t.Parallel()
	_, r, _ := switchServer(t, cdc.Config{ReconnectMaxInterval: 200 * time.Millisecond, StopOnServerChange: true})
	defer r.cancel()
	if err := r.wait(2 * time.Minute); !cdc.IsPermanent(err) || !strings.Contains(err.Error(), "the server changed") {
		t.Errorf("Run = %v, want a permanent error saying the server changed", err)
	}
}

// switchServer streams one row from a first cluster, then puts a second
// cluster (same database, table and slot names, LSNs far below) behind the
// same address and returns once the bed points at it, with the streamer
// still running.
func switchServer(t *testing.T, cfg cdc.Config) (*bed, *runner, *consumer) {
	t.Helper()
	port := freePort(t)
	// The second cluster is removed last: the bed's cleanup drops its
	// database through the shared address first.
	var second *testbed.Postgres
	t.Cleanup(func() {
		if second != nil {
			_ = second.Remove(context.Background())
		}
	})
	first := testenv.StartPostgresOnPort(t, port)
	b := newBed(t, first.URL, nil)
	// Push the first server's WAL well ahead of a new cluster's.
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO other (note) SELECT repeat('x', 400) FROM generate_series(1, 300000)`); err != nil {
		t.Fatal(err)
	}
	r := b.start(cfg)
	t.Cleanup(r.cancel)
	ids, err := b.insert(t.Context(), []row{{agg: uuidFor(1), topic: b.topic, payload: `{"server": 1}`}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	c := b.consume()
	c.untilIDs(t, ids, time.Minute)
	high := b.currentLSN(t)
	testenv.Eventually(t, time.Minute, "the first server's WAL confirmed", func() bool { return r.st.Stats().ConfirmedLSN >= high })

	// Another cluster takes the address: same database, table and slot
	// names, LSNs far below what the process confirmed.
	b.pool.Close()
	if err := first.Stop(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	if second, err = testbed.StartPostgresOnPort(t.Context(), testenv.Script(t), port); err != nil {
		t.Fatal(err)
	}
	b.recreateOn(t, second.URL)
	if cur := b.currentLSN(t); cur+64<<20 >= high {
		t.Fatalf("the second cluster's WAL (%s) is not well below the first's (%s): the test would not test anything", cur, high)
	}
	return b, r, c
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestSkippingAFailedTransactionByHand checks the documented way past a
// stop without a dead-letter topic: the error names the failed record's
// commit LSN, and advancing the stopped slot just past it skips that
// transaction, deliberately, and nothing else.
func TestSkippingAFailedTransactionByHand(t *testing.T) {
	t.Parallel()
	b := newBed(t, "", nil)
	ctx := t.Context()
	bad, err := b.insert(ctx, []row{{agg: uuidFor(1), topic: b.topic + "_missing", payload: `{"n": 1}`}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	after, err := b.insert(ctx, []row{{agg: uuidFor(2), topic: b.topic, payload: `{"n": 2}`}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	err = b.start(cdc.Config{}).wait(time.Minute)
	m := regexp.MustCompile(`commit LSN ([0-9A-F]+/[0-9A-F]+)`).FindStringSubmatch(fmt.Sprint(err))
	if m == nil {
		t.Fatalf("Run = %v, want the record's failure naming the commit LSN", err)
	}
	testenv.Eventually(t, 30*time.Second, "slot released", func() bool { return walsenderPID(t, b) == 0 })
	// The command README gives.
	if _, err := b.pool.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn + 1)`, b.slot, m[1]); err != nil {
		t.Fatal(err)
	}
	r := b.start(cdc.Config{})
	defer r.stop()
	b.consume().untilIDs(t, after, time.Minute)
	select {
	case err := <-r.done:
		t.Fatalf("after the advance the run stopped again (%v): outbox id %d was not skipped", err, bad[0])
	case <-time.After(time.Second):
	}
}
