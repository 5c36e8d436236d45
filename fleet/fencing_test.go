package fleet_test

import (
	"context"
	"fmt"
	"net"
	neturl "net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/harness/netfault"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/pipeline"
)

// partition is a Kafka dialer whose connections a test cuts off from the
// broker and heals, as a network partition between one replica and Kafka
// does: while cut, what the client writes is swallowed (the broker never
// sees it, and never answers), and connections stay open.
type partition struct{ cut atomic.Bool }

func (p *partition) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return partitionedConn{Conn: c, p: p}, nil
}

type partitionedConn struct {
	net.Conn
	p *partition
}

func (c partitionedConn) Write(b []byte) (int, error) {
	if c.p.cut.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// replicaRanked returns the replica number (of two) ranked rank for the
// pipeline named name.
func replicaRanked(name string, rank int) int {
	for r := range 2 {
		if fleet.Rank(name, r, 2) == rank {
			return r
		}
	}
	panic(fmt.Sprintf("no replica of two has rank %d", rank))
}

// TestAPipelineThatGaveUpItsSlotWritesNothingMore is issue 49, item 4: a
// replica H that gave up a pipeline while Kafka did not acknowledge its
// records (the drain timed out, the slot was confirmed below them and
// released) kept them in a Kafka client that retried without limit: when
// H reached Kafka again, it wrote its stale copies after the newer records
// of replica C, which had taken the slot over (offsets: v1 from C, v2
// from C, v1 from H: on a compacted topic the key's final value went
// back to v1). Whoever gives up a slot now withdraws what it holds before
// it lets the slot go (or, when the slot was lost under it, as soon as it
// notices), and a Kafka client it cannot withdraw from is closed.
//
// H publishes v0, is cut off from Kafka (its dialer swallows what it
// writes) with v1 sent and unanswered, and gives its pipeline up, in a
// hand-over to C or by losing its slot (cut off from PostgreSQL too, its
// walsender terminated); C publishes v1 and v2; then H reaches Kafka
// again. The topic must hold v0, v1 and v2 once each, in that order. On
// kfake and on the test bed's broker.
func TestAPipelineThatGaveUpItsSlotWritesNothingMore(t *testing.T) {
	t.Parallel()
	brokers := map[string]func(t *testing.T, topic string) []string{
		"kfake": func(t *testing.T, topic string) []string {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return c.ListenAddrs()
		},
		"real broker": func(t *testing.T, topic string) []string {
			b := testenv.Brokers(t)
			testenv.CreateTopic(t, b, topic, 1)
			return b
		},
	}
	for kafka, start := range brokers {
		for _, how := range []string{"hand-over", "slot lost"} {
			t.Run(kafka+"/"+how, func(t *testing.T) {
				t.Parallel()
				givenUpWritesNothingMore(t, start, how == "slot lost")
			})
		}
	}
}

func givenUpWritesNothingMore(t *testing.T, kafka func(t *testing.T, topic string) []string, lost bool) {
	url, conn := outboxDB(t)
	slotName, topic := testenv.Name(t, "slot"), testenv.Name(t, "topic")
	createSlot(t, conn, slotName)
	brokers := kafka(t, topic)
	const name = "p"
	// In a hand-over H is ranked after C (C claims the pipeline back); when
	// the slot is lost, before it (C, ranked after, takes a released slot
	// over, and claims nothing).
	hRank := 1
	if lost {
		hRank = 0
	}
	cut := &partition{}
	hSpec := spec(name, url, slotName, brokers)
	hSpec.Config.Stream.ShutdownTimeout = time.Second
	hSpec.Config.Kafka.Opts = []kgo.Opt{kgo.Dialer(cut.dial)}
	var pg *netfault.Proxy
	if lost {
		u, err := neturl.Parse(url)
		if err != nil {
			t.Fatal(err)
		}
		if pg, err = netfault.Start(u.Host); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Close)
		u.Host = pg.Addr
		hSpec.Config.Stream.DatabaseURL = u.String()
		hSpec.Config.Stream.ServerTimeout = 2 * time.Second
	}
	// H also runs pipeline q, which C does not, publishing to the same
	// topic: once H reaches Kafka again, q's marker record is H's last
	// word, written after anything H's clients still held for p.
	qURL, qConn := outboxDB(t)
	qSlot := testenv.Name(t, "q")
	createSlot(t, qConn, qSlot)
	qSpec := spec("q", qURL, qSlot, brokers)
	qSpec.Config.Kafka.Opts = hSpec.Config.Kafka.Opts
	cfg := func(rank int) fleet.Config {
		// H does not start its pipeline again within the test once it
		// failed (a long backoff): what it would write then is not the
		// question.
		return fleet.Config{Replica: replicaRanked(name, rank), Replicas: 2, RankDelay: 300 * time.Millisecond, RetryInitial: 5 * time.Minute, RetryMax: 5 * time.Minute}
	}
	h, err := fleet.New(cfg(hRank), []fleet.Spec{hSpec, qSpec}, fleet.Hooks{}, discard())
	if err != nil {
		t.Fatal(err)
	}
	runFleet(t, h)
	testenv.Eventually(t, time.Minute, "H streams", func() bool {
		return status(h, name).State == pipeline.StateStreaming && status(h, "q").State == pipeline.StateStreaming
	})
	held := func() int { return member(h, name).Status().Window.InFlightRecords }

	// A first record through H: its produce connection is open when it is
	// cut off, so that v1 is sent (into the void), not only buffered.
	const key = "00000000-0000-0000-0000-000000000001"
	insert(t, conn, topic, key, `{"n": 0}`)
	testenv.Eventually(t, time.Minute, "v0 acknowledged on H", func() bool { return member(h, name).Status().Window.RecordsAcked == 1 })
	cut.cut.Store(true)
	insert(t, conn, topic, key, `{"n": 1}`)
	testenv.Eventually(t, time.Minute, "v1 in flight on H", func() bool { return held() == 1 })

	c, err := fleet.New(cfg(1-hRank), []fleet.Spec{spec(name, url, slotName, brokers)}, fleet.Hooks{}, discard())
	if err != nil {
		t.Fatal(err)
	}
	runFleet(t, c)
	if lost {
		if err := pg.BlackHole(); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(t.Context(), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`, slotName); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "C streams the pipeline H gave up", func() bool { return status(c, name).State == pipeline.StateStreaming })
	insert(t, conn, topic, key, `{"n": 2}`)
	testenv.Eventually(t, time.Minute, "C published v1 and v2", func() bool { return member(c, name).Status().Window.RecordsAcked == 2 })
	withdrawn := func() bool { return status(h, name).State != pipeline.StateStreaming && held() == 0 }
	for deadline := time.Now().Add(time.Minute); !withdrawn() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if !withdrawn() {
		// Go on: what H kept shows in the topic once it reaches Kafka.
		t.Errorf("H still holds v1 a minute after it gave its slot up: %+v", status(h, name))
	}
	t.Logf("H: %+v", status(h, name))

	cut.cut.Store(false)
	if pg != nil {
		pg.Heal()
	}
	insert(t, qConn, topic, "00000000-0000-0000-0000-000000000002", `{"marker": true}`)
	// v0, v1 and v2 in order, none going back: a copy of an older one
	// after a newer one is what must not be. (Losing its slot without a
	// graceful end, H may not have confirmed v0: C sends it again, right
	// after H's, as at-least-once allows.)
	all := consume(t, brokers, topic, 4)
	var got []int
	for _, v := range all {
		var n int
		if _, err := fmt.Sscanf(v, `{"n": %d}`, &n); err == nil {
			got = append(got, n)
		}
	}
	if !slices.IsSorted(got) || len(got) < 3 || got[0] != 0 || got[len(got)-1] != 2 || !slices.Contains(got, 1) {
		t.Errorf("the topic holds %q: want v0, v1 and v2 in that order, none after a newer one", all)
	}
}
