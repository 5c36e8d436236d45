package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/publish"
)

// Issue 37 item 17: with --allow-auto-topic-creation the dead-letter topic
// check at start made the broker create the topic, then said it did not
// exist and exited 1. The check must not create it as a side effect: a
// missing topic stops the run without the flag and is created, and logged
// as created, with it; an existing one passes either way, untouched.
func TestDeadLetterTopicCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		exists      bool
		allowCreate bool
		wantErr     string // "" for none
		wantLog     string // the message of the one log line wanted, "" for none
		wantExists  bool   // the topic exists afterwards
	}{
		{name: "existing", exists: true, wantExists: true},
		{name: "existing, creation allowed", exists: true, allowCreate: true, wantExists: true},
		{name: "missing", wantErr: "--dead-letter-topic: Kafka topic does not exist: dlq: create it first, or set --allow-auto-topic-creation"},
		{name: "missing, creation allowed", allowCreate: true, wantExists: true,
			wantLog: "created the dead-letter topic with the broker's default partitions and replication factor (--allow-auto-topic-creation)"},
	}
	// The settings as run's flags name them.
	flags := field.Flags(func(path string) string {
		return map[string]string{"Pump.DeadLetterTopic": "dead-letter-topic", "Kafka.AllowAutoTopicCreation": "allow-auto-topic-creation"}[path]
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A broker that creates any topic a metadata request asks it to.
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			topic := "dlq"
			if tt.exists {
				testenv.CreateTopic(t, c.ListenAddrs(), topic, 1)
			}
			p, err := publish.New(publish.Config{Brokers: c.ListenAddrs(), AllowAutoTopicCreation: tt.allowCreate}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			var logs bytes.Buffer
			err = checkDeadLetterTopic(t.Context(), p, topic, tt.allowCreate, flags, slog.New(slog.NewJSONHandler(&logs, nil)))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("checkDeadLetterTopic = %v, want nil", err)
			case tt.wantErr != "" && (!errors.Is(err, publish.ErrTopicMissing) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("checkDeadLetterTopic = %v, want ErrTopicMissing saying %q", err, tt.wantErr)
			}
			var msgs []string
			for line := range strings.Lines(logs.String()) {
				var rec struct {
					Msg   string `json:"msg"`
					Topic string `json:"dead_letter_topic"`
				}
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				if rec.Topic != topic {
					t.Errorf("log line %q does not name the dead-letter topic", line)
				}
				msgs = append(msgs, rec.Msg)
			}
			var want []string
			if tt.wantLog != "" {
				want = []string{tt.wantLog}
			}
			if !slices.Equal(msgs, want) {
				t.Errorf("logged %q, want %q", msgs, want)
			}
			topics, err := testenv.Admin(t, c.ListenAddrs()).ListTopics(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if got := topics.Has(topic); got != tt.wantExists {
				t.Errorf("topic exists afterwards: %v, want %v", got, tt.wantExists)
			}
		})
	}
}
