package fleet_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/pipeline"
)

// Two replicas run the same pipelines: each pipeline streams on the
// replica ranked first for it. A replica stopped gracefully (SIGTERM)
// hands its pipelines to the other; when it comes back, it takes back its
// preferred ones through a hand-over. Rows written all along arrive once
// each, in order: graceful hand-overs publish no duplicate.
func TestReplicasHandPipelinesOverWithoutDuplicates(t *testing.T) {
	t.Parallel()
	brokers := testenv.Brokers(t)
	const pipelines = 4
	type outbox struct {
		name, topic string
		insert      func(n int) error
	}
	var specs []fleet.Spec
	var outboxes []outbox
	preferred := map[int]int{}
	for i := range pipelines {
		url, conn := outboxDB(t)
		name := fmt.Sprintf("p%d", i)
		slotName, topic := testenv.Name(t, name), testenv.CreateTopic(t, brokers, testenv.Name(t, name), 1)
		createSlot(t, conn, slotName)
		specs = append(specs, spec(name, url, slotName, brokers))
		outboxes = append(outboxes, outbox{name, topic, func(n int) error {
			_, err := conn.Exec(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('00000000-0000-0000-0000-000000000001', $1, $2)`,
				topic, fmt.Sprintf(`{"n": %d}`, n))
			return err
		}})
		for r := range 2 {
			if fleet.Rank(name, r, 2) == 0 {
				preferred[r]++
			}
		}
	}
	if preferred[0] == 0 || preferred[1] == 0 {
		t.Fatalf("pipeline names preferring one replica only (%v): pick others", preferred)
	}
	replica := func(r int) (*fleet.Fleet, func()) {
		f, err := fleet.New(fleet.Config{Replica: r, Replicas: 2, RankDelay: 600 * time.Millisecond}, specs, fleet.Hooks{}, discard())
		if err != nil {
			t.Fatal(err)
		}
		return f, runFleet(t, f)
	}
	// placed: every pipeline streams on its preferred replica among alive,
	// and stands by on the others.
	placed := func(alive ...*fleet.Fleet) func() bool {
		return func() bool {
			for _, o := range outboxes {
				streams := 0
				for _, f := range alive {
					st := status(f, o.name)
					if st.State == pipeline.StateStreaming {
						streams++
						if len(alive) == 2 && member(f, o.name).Rank() != 0 {
							return false
						}
					} else if st.State != pipeline.StateStandby {
						return false
					}
				}
				if streams != 1 {
					return false
				}
			}
			return true
		}
	}

	r0, stop0 := replica(0)
	r1, stop1 := replica(1)
	testenv.Eventually(t, time.Minute, "each pipeline streams on the replica ranked first for it", placed(r0, r1))

	var wg sync.WaitGroup
	done := make(chan struct{})
	var stopWriting sync.Once
	written := make([]int, pipelines)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for i, o := range outboxes {
				if err := o.insert(written[i]); err != nil {
					t.Errorf("writing to %s: %v", o.name, err)
					return
				}
				written[i]++
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { // before the connections close
		stopWriting.Do(func() { close(done) })
		wg.Wait()
	})

	stop0() // SIGTERM: replica 0 drains and releases its pipelines
	testenv.Eventually(t, time.Minute, "replica 1 streams every pipeline after replica 0 stopped", placed(r1))
	r0again, _ := replica(0)
	testenv.Eventually(t, time.Minute, "replica 0 took back its preferred pipelines", placed(r0again, r1))
	stopWriting.Do(func() { close(done) })
	wg.Wait()
	for i, o := range outboxes {
		inOrder(t, consume(t, brokers, o.topic, written[i]), written[i])
	}
	stop1()
}

// Issue 49, item 15: every replica of a pipeline ran its heartbeat, so N
// replicas wrote N heartbeats an interval (WAL, and a keepalive to every
// slot of the server, for each). Only the replica streaming the slot
// writes them.
func TestOnlyTheReplicaStreamingWritesHeartbeats(t *testing.T) {
	t.Parallel()
	brokers := testenv.Brokers(t)
	url, conn := outboxDB(t)
	slotName := testenv.Name(t, "hb")
	createSlot(t, conn, slotName)
	s := spec("hb", url, slotName, brokers)
	s.Config.Heartbeat = 100 * time.Millisecond
	replica := func(r int) *fleet.Fleet {
		f, err := fleet.New(fleet.Config{Replica: r, Replicas: 2, RankDelay: 300 * time.Millisecond}, []fleet.Spec{s}, fleet.Hooks{}, discard())
		if err != nil {
			t.Fatal(err)
		}
		runFleet(t, f)
		return f
	}
	r0, r1 := replica(0), replica(1)
	var holder, standby *fleet.Fleet
	testenv.Eventually(t, time.Minute, "one replica streaming, the other standing by", func() bool {
		s0, s1 := status(r0, "hb").State, status(r1, "hb").State
		switch {
		case s0 == pipeline.StateStreaming && s1 == pipeline.StateStandby:
			holder, standby = r0, r1
		case s1 == pipeline.StateStreaming && s0 == pipeline.StateStandby:
			holder, standby = r1, r0
		}
		return holder != nil
	})
	heartbeats := func(f *fleet.Fleet) uint64 { return f.Members()[0].Status().Heartbeats }
	testenv.Eventually(t, time.Minute, "the holder writing heartbeats", func() bool { return heartbeats(holder) >= 5 })
	if n := heartbeats(standby); n != 0 {
		t.Errorf("the standby wrote %d heartbeats, want none", n)
	}
}

// Issue 49, item 10: any role of the database could NOTIFY
// outboxd_handover and make a replica hand its pipelines over. A request
// is acted on only when outboxd_slots, which only outboxd's role writes,
// records a replica's claim.
func TestANotificationAloneHandsNothingOver(t *testing.T) {
	t.Parallel()
	brokers := testenv.Brokers(t)
	url, conn := outboxDB(t)
	slotName := testenv.Name(t, "h")
	createSlot(t, conn, slotName)
	var log testenv.SyncBuffer
	// The replica ranked after the other: it hands over to a claim.
	r := replicaRanked("p", 1)
	f, err := fleet.New(fleet.Config{Replica: r, Replicas: 2, RankDelay: 200 * time.Millisecond}, []fleet.Spec{spec("p", url, slotName, brokers)}, fleet.Hooks{},
		slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runFleet(t, f)
	testenv.Eventually(t, time.Minute, "streaming", func() bool { return status(f, "p").State == pipeline.StateStreaming })
	time.Sleep(500 * time.Millisecond) // its listener is up
	if _, err := conn.Exec(t.Context(), `SELECT pg_notify('outboxd_handover', $1)`, slotName); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the bare notification refused", func() bool { return strings.Contains(log.String(), "without a replica's record of it") })
	if st := status(f, "p"); st.State != pipeline.StateStreaming {
		t.Errorf("after a bare notification the pipeline is %+v, want still streaming", st)
	}
	// A claim recorded as a replica records it is honoured.
	if _, err := conn.Exec(t.Context(), `UPDATE outboxd_slots SET handover_at = now(), handover_by = $2 WHERE slot_name = $1`, slotName, 1-r); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `SELECT pg_notify('outboxd_handover', $1)`, slotName); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the recorded claim honoured", func() bool { return status(f, "p").State != pipeline.StateStreaming })
}

// Issue 49, item 16: after a SIGTERM, the replica ranked next took the
// pipeline only after its slot retry and its rank's delay. The replica
// letting the slot go gracefully names it (outboxd_slots) and tells it,
// and it takes the slot at once, standing by or still waiting by its
// rank before its first try: here within three quarters of its rank's
// delay.
func TestAGracefulReleaseIsTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// rankDelay is the next ranked replica's wait before it takes
		// the slot, which the release makes it skip.
		rankDelay time.Duration
		// when is its state when the first ranked stops.
		when pipeline.State
	}{
		// The rank's delay is also its wait before it stands by.
		{name: "standing by", rankDelay: 20 * time.Second, when: pipeline.StateStandby},
		// A rollout that stops the replica right after its peer started.
		{name: "waiting before its first try", rankDelay: 10 * time.Minute, when: fleet.StateWaiting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			brokers := testenv.Brokers(t)
			url, conn := outboxDB(t)
			slotName := testenv.Name(t, "g")
			createSlot(t, conn, slotName)
			s := spec("p", url, slotName, brokers)
			replica := func(rank int) (*fleet.Fleet, func()) {
				f, err := fleet.New(fleet.Config{Replica: replicaRanked("p", rank), Replicas: 2, RankDelay: tt.rankDelay}, []fleet.Spec{s}, fleet.Hooks{}, discard())
				if err != nil {
					t.Fatal(err)
				}
				return f, runFleet(t, f)
			}
			first, stopFirst := replica(0)
			testenv.Eventually(t, time.Minute, "the first ranked streaming", func() bool { return status(first, "p").State == pipeline.StateStreaming })
			next, _ := replica(1)
			testenv.Eventually(t, tt.rankDelay+time.Minute, "the next ranked "+tt.name, func() bool { return status(next, "p").State == tt.when })
			stopFirst() // SIGTERM
			testenv.Eventually(t, 3*tt.rankDelay/4, fmt.Sprintf("the next ranked streaming before its rank's delay of %s", tt.rankDelay), func() bool {
				return status(next, "p").State == pipeline.StateStreaming
			})
		})
	}
}

// Issue 49, item 28: every connection was named just outboxd. A fleet's
// stream is named for its pipeline, its replica where there are several,
// and its settings' fingerprint, so that pg_stat_replication tells which
// replica holds which slot, and a standby can compare settings.
func TestTheStreamNamesPipelineAndReplica(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		replicas int
		want     func(replica int) string
	}{
		{name: "one process", replicas: 1, want: func(int) string { return "outboxd/p #0badcafe" }},
		{name: "replicas", replicas: 2, want: func(r int) string { return fmt.Sprintf("outboxd/p/%d #0badcafe", r) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			brokers := testenv.Brokers(t)
			url, conn := outboxDB(t)
			slotName := testenv.Name(t, "n")
			createSlot(t, conn, slotName)
			s := spec("p", url, slotName, brokers)
			s.Settings = "0badcafe"
			r := replicaRanked("p", 0)
			f, err := fleet.New(fleet.Config{Replica: r, Replicas: tt.replicas, RankDelay: time.Minute}, []fleet.Spec{s}, fleet.Hooks{}, discard())
			if err != nil {
				t.Fatal(err)
			}
			runFleet(t, f)
			testenv.Eventually(t, time.Minute, "streaming", func() bool { return status(f, "p").State == pipeline.StateStreaming })
			var got string
			if err := conn.QueryRow(t.Context(), `SELECT application_name FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid
				WHERE s.slot_name = $1`, slotName).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if want := tt.want(r); got != want {
				t.Fatalf("the stream's application_name is %q, want %q", got, want)
			}
		})
	}
}
