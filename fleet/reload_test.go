package fleet_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/harness/netfault"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/pipeline"
)

func member(f *fleet.Fleet, name string) *fleet.Member {
	for _, m := range f.Members() {
		if m.Name() == name {
			return m
		}
	}
	return nil
}

func streaming(f *fleet.Fleet, name string) func() bool {
	return func() bool { return status(f, name).State == pipeline.StateStreaming }
}

// A reload starts added pipelines, restarts changed ones, drains and
// releases removed ones, and leaves the others running untouched.
func TestReloadTouchesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	brokers := testenv.Brokers(t)
	urlA, connA := outboxDB(t)
	urlB, connB := outboxDB(t)
	slotA, slotB := testenv.Name(t, "a"), testenv.Name(t, "b")
	createSlot(t, connA, slotA)
	createSlot(t, connB, slotB)
	topicA := testenv.CreateTopic(t, brokers, testenv.Name(t, "a"), 1)
	topicB := testenv.CreateTopic(t, brokers, testenv.Name(t, "b"), 1)
	a, b := spec("a", urlA, slotA, brokers), spec("b", urlB, slotB, brokers)

	f, err := fleet.New(fleet.Config{}, []fleet.Spec{a}, fleet.Hooks{}, discard())
	if err != nil {
		t.Fatal(err)
	}
	runFleet(t, f)
	testenv.Eventually(t, time.Minute, "a streams", streaming(f, "a"))
	memberA := member(f, "a")
	key := "00000000-0000-0000-0000-00000000000a"
	row := 0
	insertA := func(k int) {
		for range k {
			insert(t, connA, topicA, key, fmt.Sprintf(`{"n": %d}`, row))
			row++
		}
	}
	insertA(10)

	// Added.
	if err := f.Reload([]fleet.Spec{a, b}); err != nil {
		t.Fatal(err)
	}
	insertA(10)
	testenv.Eventually(t, time.Minute, "b streams after it was added", streaming(f, "b"))
	insert(t, connB, topicB, key, `{"n": 0}`)

	// Changed: b restarts, a stays.
	b2 := b
	b2.Fingerprint += "/changed"
	b2.Config.Heartbeat = time.Hour
	memberB := member(f, "b")
	if err := f.Reload([]fleet.Spec{a, b2}); err != nil {
		t.Fatal(err)
	}
	insert(t, connB, topicB, key, `{"n": 1}`)
	insertA(10)
	testenv.Eventually(t, time.Minute, "b restarted", func() bool { return member(f, "b") != memberB && streaming(f, "b")() })
	insert(t, connB, topicB, key, `{"n": 2}`)
	inOrder(t, consume(t, brokers, topicB, 3), 3)
	if st := memberB.Status(); st.State != fleet.StateStopped {
		t.Errorf("b's first member after the change: %+v, want stopped", st)
	}

	if m, st := member(f, "a"), status(f, "a"); m != memberA || st.PermanentErrors != 0 || st.State != pipeline.StateStreaming {
		t.Errorf("a after two reloads that did not change it: member replaced %v, status %+v: want it untouched (never failed), streaming", m != memberA, st)
	}
	inOrder(t, consume(t, brokers, topicA, row), row)

	// Removed: a drains, confirms and releases its slot.
	if err := f.Reload([]fleet.Spec{b2}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "a stopped after it was removed", func() bool { return memberA.Status().State == fleet.StateStopped })
	if member(f, "a") != nil {
		t.Error("a is still a member after it was removed")
	}
	testenv.Eventually(t, time.Minute, "slot "+slotA+" released after its pipeline was removed", func() bool {
		var active bool
		err := connA.QueryRow(t.Context(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slotA).Scan(&active)
		return err == nil && !active
	})
	if err := f.Reload([]fleet.Spec{b2, b2}); err == nil {
		t.Error("a reload naming b twice was taken")
	}
	if !streaming(f, "b")() {
		t.Errorf("b after a refused reload: %+v", status(f, "b"))
	}
}

// Regression: a pipeline removed by one reload and added back by the next
// while its old member still drained started at once beside it, and the
// old member's leaving unregistered the new one's metrics. It starts once
// the old one left: never two members of one name at a time.
func TestRemovedAndAddedBackWaitsForTheOldMember(t *testing.T) {
	t.Parallel()
	url, conn := outboxDB(t)
	slotName := testenv.Name(t, "a")
	createSlot(t, conn, slotName)
	closed, err := netfault.FreeAddr() // no broker: a record waits, and the drain with it
	if err != nil {
		t.Fatal(err)
	}
	a := spec("a", url, slotName, []string{closed})
	a.Config.Stream.ShutdownTimeout = 3 * time.Second
	var mu sync.Mutex
	live, most := 0, 0
	hooks := fleet.Hooks{
		Added: func(*fleet.Member) {
			mu.Lock()
			defer mu.Unlock()
			live++
			most = max(most, live)
		},
		Removed: func(*fleet.Member) { mu.Lock(); defer mu.Unlock(); live-- },
	}
	f, err := fleet.New(fleet.Config{}, []fleet.Spec{a}, hooks, discard())
	if err != nil {
		t.Fatal(err)
	}
	runFleet(t, f)
	testenv.Eventually(t, time.Minute, "a streams", streaming(f, "a"))
	insert(t, conn, "t", "00000000-0000-0000-0000-000000000001", `{"n": 0}`)
	old := member(f, "a")
	testenv.Eventually(t, time.Minute, "a record in flight", func() bool { return old.Status().Window.InFlightRecords > 0 })
	if err := f.Reload(nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a removed", func() bool { return member(f, "a") == nil })
	if err := f.Reload([]fleet.Spec{a}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "a back after its old member left", func() bool {
		return member(f, "a") != nil && member(f, "a") != old && old.Status().State == fleet.StateStopped
	})
	time.Sleep(500 * time.Millisecond) // for a second Added, were one coming
	mu.Lock()
	defer mu.Unlock()
	if most != 1 || live != 1 {
		t.Errorf("members of a registered at once: at most %d, now %d; want 1 and 1", most, live)
	}
}
