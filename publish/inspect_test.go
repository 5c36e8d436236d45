package publish_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/publish"
)

// Issue 53: Inspect says what the client may do on each topic, as the
// broker's ACLs decide (outboxd doctor's Write/Describe check): a topic
// it may write, one it may only describe, one it may not even describe,
// and one that does not exist.
func TestInspectReadsWhatTheClientMayDo(t *testing.T) {
	t.Parallel()
	topic := func(name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.SeedTopics(1, "writable", "readonly", "hidden"),
		kfake.User("PLAIN", "outboxd", "secret",
			topic("writable", kmsg.ACLOperationWrite), topic("writable", kmsg.ACLOperationDescribe),
			topic("readonly", kmsg.ACLOperationDescribe),
			kfake.ACL{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true},
		))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := publish.Config{Brokers: c.ListenAddrs(), SASL: publish.SASL{Mechanism: "PLAIN", Username: "outboxd", Password: "secret"}}
	facts, err := publish.Inspect(t.Context(), cfg, []string{"writable", "readonly", "hidden", "missing"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		topic string
		want  publish.TopicFacts
	}{
		{"writable", publish.TopicFacts{Exists: true, Partitions: 1, RF: 1, ACLKnown: true, CanWrite: true, CanDescribe: true}},
		{"readonly", publish.TopicFacts{Exists: true, Partitions: 1, RF: 1, ACLKnown: true, CanDescribe: true}},
	}
	for _, tt := range tests {
		got := facts.Topics[tt.topic]
		got.MinISR = 0 // describing configs is not granted here
		if got != tt.want {
			t.Errorf("topic %s: %+v, want %+v", tt.topic, got, tt.want)
		}
	}
	if got := facts.Topics["hidden"]; !got.Denied || got.Exists || got.CanWrite {
		t.Errorf("a topic the client may not describe: %+v, want denied", got)
	}
	if got := facts.Topics["missing"]; got.Exists {
		t.Errorf("a topic that does not exist: %+v, want not existing", got)
	}
}
