package pump

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/outboxd/outboxd/outbox"
)

// Issue 37 item 18: a row that could not become a record (a NULL topic)
// was dead-lettered without a log line, though the README promises an
// Error naming it. Every dead letter, a row refused by the decoder or a
// record refused by Kafka, logs exactly one Error with its outbox id,
// position, table and reason.
func TestDeadLetterLogsOneErrorNamingIt(t *testing.T) {
	t.Parallel()
	nullTopic := &outbox.RowError{Table: "public.outbox", Column: "topic", ID: "7", Err: errors.New("null topic"),
		Key: []byte("k"), Value: []byte(`{"a": 1}`), CommitLSN: 0x100, Index: 3}
	tests := []struct {
		name string
		// run feeds the pump (Run running) and waits until the dead
		// letter is on its way.
		run  func(t *testing.T, p *Pump, s *fakeSink)
		sink func(ev *outbox.Event) error // fakeSink.sync
		want map[string]any               // the Error line's keys (JSON values)
	}{
		{
			name: "row with a null topic",
			run: func(t *testing.T, p *Pump, s *fakeSink) {
				t.Helper()
				apply(t, p, begin(0x100))
				if err := p.Reject(t.Context(), nullTopic); err != nil {
					t.Fatal(err)
				}
				apply(t, p, commit(0x200))
			},
			want: map[string]any{"outbox_id": "7", "commit_lsn": "0/100", "index": 3.0, "table": "public.outbox", "topic": "",
				"dead_letter_topic": "dlq", "reason": `decoding insert into public.outbox: column "topic": null topic (outbox id 7)`},
		},
		{
			name: "record Kafka refused",
			sink: func(ev *outbox.Event) error {
				if ev.Topic == "dlq" {
					return nil
				}
				return errors.New("TOPIC_AUTHORIZATION_FAILED")
			},
			run: func(t *testing.T, p *Pump, s *fakeSink) {
				t.Helper()
				apply(t, p, begin(0x100), event(1, "a"), commit(0x200))
				waitFor(t, func() bool { return p.Flushed() == 0x200 })
			},
			want: map[string]any{"outbox_id": "1", "commit_lsn": "0/100", "index": 0.0, "table": "public.outbox", "topic": "t",
				"dead_letter_topic": "dlq", "reason": "TOPIC_AUTHORIZATION_FAILED"},
		},
		{
			name: "record too large for the dead-letter topic too",
			sink: func(ev *outbox.Event) error {
				if ev.Value != nil {
					return fmt.Errorf("refused: %w", outbox.ErrRecordTooLarge) // the original and its dead-letter copy
				}
				return nil // the reference
			},
			run: func(t *testing.T, p *Pump, s *fakeSink) {
				t.Helper()
				apply(t, p, begin(0x100), event(1, "a"), commit(0x200))
				waitFor(t, func() bool { return p.Flushed() == 0x200 })
			},
			want: map[string]any{"outbox_id": "1", "commit_lsn": "0/100", "index": 0.0, "table": "public.outbox", "topic": "t",
				"dead_letter_topic": "dlq", "reason": "refused: record too large"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs syncBuffer
			s := &fakeSink{sync: tt.sink}
			p, err := New(Config{DeadLetterTopic: "dlq"}, s, slog.New(slog.NewJSONHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			p.Start(0x10)
			runPump(t, p)
			tt.run(t, p, s)
			var dead []map[string]any
			for line := range strings.Lines(logs.String()) {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				if _, ok := rec["reason"]; ok && rec["level"] == "ERROR" {
					dead = append(dead, rec)
				}
			}
			if len(dead) != 1 {
				t.Fatalf("%d Error lines naming a dead letter, want 1; the log:\n%s", len(dead), logs.String())
			}
			for k, want := range tt.want {
				if got, ok := dead[0][k]; !ok || got != want {
					t.Errorf("dead-letter log %s = %#v, want %#v", k, got, want)
				}
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test reading it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
