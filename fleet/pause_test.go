package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/publish"
)

// Issue 53: a pipeline paused (Paused, by a reload) drains, confirms and
// reads nothing while rows go on being written; its slot is kept and
// watched. Resumed, it goes on from the confirmed position: every row
// once, in order, in both delivery modes.
func TestPauseAndResumeLoseNothingAndRepeatNothing(t *testing.T) {
	t.Parallel()
	for _, delivery := range []string{pipeline.AtLeastOnce, pipeline.ExactlyOnce} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			brokers := testenv.Brokers(t)
			url, conn, slotName, topic, s := pausable(t, brokers)
			s.Config.Delivery = delivery
			s.Config.Txn = publish.TxnConfig{ProgressTopic: testenv.Name(t, "progress"), Interval: 50 * time.Millisecond}
			var opts []kgo.Opt
			if delivery == pipeline.ExactlyOnce {
				opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			}
			f, err := fleet.New(fleet.Config{}, []fleet.Spec{s}, fleet.Hooks{}, discard())
			if err != nil {
				t.Fatal(err)
			}
			runFleet(t, f)
			testenv.Eventually(t, time.Minute, "streaming", streaming(f, "p"))

			// A writer goes on through the pause and the resume: the pause
			// finds transactions open and records in flight.
			key := "00000000-0000-0000-0000-00000000000b"
			var mu sync.Mutex
			written := 0
			stopWriting := make(chan struct{})
			wrote := make(chan struct{})
			wconn := writerConn(t, url)
			var stopOnce sync.Once
			stop := func() { stopOnce.Do(func() { close(stopWriting) }); <-wrote }
			t.Cleanup(stop) // before the connection closes: cleanups run last first
			go func() {
				defer close(wrote)
				for {
					select {
					case <-stopWriting:
						return
					default:
					}
					mu.Lock()
					n := written
					mu.Unlock()
					if _, err := wconn.Exec(context.Background(), `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ($1::uuid, $2, $3)`, key, topic, fmt.Sprintf(`{"n": %d}`, n)); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					written++
					mu.Unlock()
				}
			}()
			count := func() int { mu.Lock(); defer mu.Unlock(); return written }
			testenv.Eventually(t, time.Minute, "100 rows written", func() bool { return count() >= 100 })

			paused := s
			paused.Fingerprint, paused.Config.Paused = "paused", true
			if err := f.Reload([]fleet.Spec{paused}); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, time.Minute, "paused, with its retained WAL watched", func() bool {
				st := status(f, "p")
				return st.State == pipeline.StatePaused && st.RetainedWAL >= 0
			})
			st := status(f, "p")
			if st.PausedSince.IsZero() || !strings.HasPrefix(st.Detail, "paused since ") {
				t.Errorf("paused pipeline's status %+v: want when it paused, in PausedSince and Detail", st)
			}
			testenv.Eventually(t, time.Minute, "the slot let go", func() bool {
				var active bool
				err := conn.QueryRow(t.Context(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slotName).Scan(&active)
				return err == nil && !active
			})
			// While paused, nothing more reaches Kafka: what was published
			// at the pause is a prefix of the rows, each once, and rows
			// written since are not among them.
			atPause := count()
			testenv.Eventually(t, time.Minute, "rows written while paused", func() bool { return count() >= atPause+100 })
			published := consume(t, brokers, topic, 0, opts...)
			inOrder(t, published, len(published))
			if len(published) > atPause {
				t.Errorf("%d records in Kafka while paused, more than the %d rows written when the pause took effect", len(published), atPause)
			}

			resumed := s
			resumed.Fingerprint = "resumed"
			if err := f.Reload([]fleet.Spec{resumed}); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, time.Minute, "streaming again", streaming(f, "p"))
			testenv.Eventually(t, time.Minute, "100 rows written after the resume", func() bool { return count() >= atPause+200 })
			stop()
			n := count()
			inOrder(t, consume(t, brokers, topic, n, opts...), n)
		})
	}
}

// pausable makes a pipeline "p" of its own database, slot and topic,
// running (Fingerprint "running"; a test pauses it by a reload).
func pausable(t *testing.T, brokers []string) (url string, conn *pgx.Conn, slotName, topic string, s fleet.Spec) {
	t.Helper()
	url, conn = outboxDB(t)
	slotName = testenv.Name(t, "slot")
	createSlot(t, conn, slotName)
	topic = testenv.CreateTopic(t, brokers, testenv.Name(t, "topic"), 1)
	s = spec("p", url, slotName, brokers)
	s.Fingerprint = "running"
	return url, conn, slotName, topic, s
}

// writerConn is a connection of the test's own to url, for a writer
// beside the test's other queries.
func writerConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Issue 53: a pipeline paused on both replicas of a deployment (the same
// file reloaded by each) is streamed by neither: no replica takes the slot
// the other let go, nor asks for it back. Resumed, one of them streams it
// from the confirmed position: every row once, in order.
func TestAPausedPipelineStaysPausedOnEveryReplica(t *testing.T) {
	t.Parallel()
	brokers := testenv.Brokers(t)
	_, conn, slotName, topic, s := pausable(t, brokers)
	var replicas []*fleet.Fleet
	for r := range 2 {
		f, err := fleet.New(fleet.Config{Replica: r, Replicas: 2, RankDelay: 600 * time.Millisecond}, []fleet.Spec{s}, fleet.Hooks{}, discard())
		if err != nil {
			t.Fatal(err)
		}
		runFleet(t, f)
		replicas = append(replicas, f)
	}
	streamedBy := func(want pipeline.State) func() bool {
		return func() bool {
			n := 0
			for _, f := range replicas {
				if status(f, "p").State == want {
					n++
				}
			}
			return want == pipeline.StateStreaming && n == 1 || n == len(replicas)
		}
	}
	testenv.Eventually(t, time.Minute, "one replica streaming", streamedBy(pipeline.StateStreaming))
	key := "00000000-0000-0000-0000-00000000000c"
	rows := 0
	write := func(n int) {
		for range n {
			insert(t, conn, topic, key, fmt.Sprintf(`{"n": %d}`, rows))
			rows++
		}
	}
	write(10)

	paused := s
	paused.Fingerprint, paused.Config.Paused = "paused", true
	for _, f := range replicas {
		if err := f.Reload([]fleet.Spec{paused}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "paused on both replicas", streamedBy(pipeline.StatePaused))
	// What the stream had read when told to pause is in Kafka; rows it
	// had not read yet wait in the slot with those written since.
	atPause := len(consume(t, brokers, topic, 0))
	write(10)
	// Several rank delays and slot retries: a replica that took the
	// released slot, or asked for it back, would have done it by now.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		var active bool
		if err := conn.QueryRow(t.Context(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slotName).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if active {
			t.Fatal("a replica streams the slot of the pipeline paused on both")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := consume(t, brokers, topic, 0); len(got) != atPause {
		t.Errorf("%d records in Kafka while the pipeline was paused on both replicas, want the %d published before", len(got), atPause)
	}

	resumed := s
	resumed.Fingerprint = "resumed"
	for _, f := range replicas {
		if err := f.Reload([]fleet.Spec{resumed}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "one replica streaming again", streamedBy(pipeline.StateStreaming))
	write(10)
	inOrder(t, consume(t, brokers, topic, rows), rows)
}
