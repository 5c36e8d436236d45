package publish_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/publish"
)

// Regression (issue 37): a record for a topic that does not exist stopped
// the run with UNKNOWN_TOPIC_OR_PARTITION alone; a new user did not learn
// that outboxd creates no topics, nor how to let the broker create them.
func TestUnknownTopicSaysWhatToDo(t *testing.T) {
	t.Parallel()
	// Named as run's flags name it (a pipelines file's key, a library's
	// field: lib/field's tests).
	names := field.Flags(func(path string) string {
		return map[string]string{"AllowAutoTopicCreation": "allow-auto-topic-creation"}[path]
	})
	p, err := publish.New(publish.Config{Brokers: fakeCluster(t, "t"), Names: names}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = publishOne(t, p, outbox.Event{Topic: "missing", Value: []byte("{}"), Headers: idHeader("9")})
	var pe *publish.Error
	if !errors.As(err, &pe) || pe.ID != "9" || !errors.Is(err, kerr.UnknownTopicOrPartition) ||
		!strings.Contains(err.Error(), "--allow-auto-topic-creation") {
		t.Errorf("record for a missing topic: %v; want UNKNOWN_TOPIC_OR_PARTITION naming outbox id 9 and --allow-auto-topic-creation", err)
	}
}
