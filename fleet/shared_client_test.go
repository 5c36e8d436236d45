package fleet_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/publish"
)

// At-least-once pipelines given one publish.Pool and key publish through
// one Kafka client; it closes when the last of them stops.
func TestPipelinesShareAKafkaClient(t *testing.T) {
	t.Parallel()
	brokers := testenv.Brokers(t)
	pool := publish.NewPool(discard())
	var specs []fleet.Spec
	type outbox struct {
		topic string
		write func(n int)
	}
	var outboxes []outbox
	for i := range 3 {
		url, conn := outboxDB(t)
		slotName, topic := testenv.Name(t, "s"), testenv.CreateTopic(t, brokers, testenv.Name(t, "t"), 1)
		createSlot(t, conn, slotName)
		s := spec(fmt.Sprintf("p%d", i), url, slotName, brokers)
		s.Config.Clients, s.Config.ClientKey = pool, "one cluster"
		specs = append(specs, s)
		outboxes = append(outboxes, outbox{topic, func(n int) {
			insert(t, conn, topic, "00000000-0000-0000-0000-000000000001", fmt.Sprintf(`{"n": %d}`, n))
		}})
	}
	f, err := fleet.New(fleet.Config{}, specs, fleet.Hooks{}, discard())
	if err != nil {
		t.Fatal(err)
	}
	stop := runFleet(t, f)
	for _, s := range specs {
		testenv.Eventually(t, time.Minute, s.Name+" streams", streaming(f, s.Name))
	}
	if n := pool.Clients(); n != 1 {
		t.Errorf("three pipelines of one key hold %d Kafka clients, want 1", n)
	}
	for _, o := range outboxes {
		for i := range 5 {
			o.write(i)
		}
	}
	for _, o := range outboxes {
		inOrder(t, consume(t, brokers, o.topic, 5), 5)
	}
	stop()
	if n := pool.Clients(); n != 0 {
		t.Errorf("after every pipeline stopped, the pool holds %d clients, want 0", n)
	}
}
