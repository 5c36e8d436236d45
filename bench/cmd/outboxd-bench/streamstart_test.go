package main

import (
	"strings"
	"testing"
	"time"
)

// Regression (issue 38): drains were timed from the first record in Kafka,
// which left out whatever a system buffered before its first send
// (Debezium's drain of one backlog measured several times faster in one
// repetition than in the other). They are timed from the stream's start,
// taken as the latest moment known to precede it, and never to a zero or
// negative time.
func TestTimeDrainFromTheStreamStart(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name        string
		s           streamSighting
		end         time.Time
		wantStartup time.Duration
		wantDrain   time.Duration
		wantFrom    string
	}{
		{
			name: "connection inside the poll interval: from its backend_start",
			s:    streamSighting{Launched: at(0), LastUnseen: at(100), BackendStart: at(102), Seen: at(105)},
			end:  at(1102), wantStartup: 102 * time.Millisecond, wantDrain: time.Second, wantFrom: "stream start",
		},
		{
			name: "connection opened long before the slot was taken: from the last poll that found no stream",
			s:    streamSighting{Launched: at(0), LastUnseen: at(500), BackendStart: at(50), Seen: at(505)},
			end:  at(1500), wantStartup: 500 * time.Millisecond, wantDrain: time.Second, wantFrom: "stream start",
		},
		{
			name: "no backend_start known: from the last poll that found no stream",
			s:    streamSighting{Launched: at(0), LastUnseen: at(300), Seen: at(305)},
			end:  at(2300), wantStartup: 300 * time.Millisecond, wantDrain: 2 * time.Second, wantFrom: "stream start",
		},
		{
			name: "stream started before the first poll after launch: from launch, no start-up",
			s:    streamSighting{Launched: at(10), LastUnseen: at(5), Seen: at(15)},
			end:  at(1010), wantDrain: time.Second, wantFrom: "stream start",
		},
		{
			name: "backend_start before launch (an older connection): from launch",
			s:    streamSighting{Launched: at(10), BackendStart: at(-1000), Seen: at(15)},
			end:  at(1010), wantDrain: time.Second, wantFrom: "stream start",
		},
		{
			name: "backend_start after the poll that saw the stream is not believed",
			s:    streamSighting{Launched: at(0), LastUnseen: at(100), BackendStart: at(900), Seen: at(105)},
			end:  at(1100), wantStartup: 100 * time.Millisecond, wantDrain: time.Second, wantFrom: "stream start",
		},
		{
			name: "stream never seen (a drain shorter than the poll): from launch",
			s:    streamSighting{Launched: at(0), LastUnseen: at(40)},
			end:  at(60), wantDrain: 60 * time.Millisecond, wantFrom: "launch",
		},
		{
			name: "stream seen only after the drain ended: from launch, not a negative time",
			s:    streamSighting{Launched: at(0), LastUnseen: at(800), Seen: at(805)},
			end:  at(700), wantDrain: 700 * time.Millisecond, wantFrom: "launch",
		},
		{
			name: "stream start at the very end: from launch, not a zero time",
			s:    streamSighting{Launched: at(0), LastUnseen: at(700), Seen: at(705)},
			end:  at(700), wantDrain: 700 * time.Millisecond, wantFrom: "launch",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := timeDrain(tt.s, tt.end)
			if err != nil {
				t.Fatal(err)
			}
			if got.Startup != tt.wantStartup || got.Drain != tt.wantDrain || got.From != tt.wantFrom {
				t.Errorf("timeDrain = start-up %v, drain %v from %q; want %v, %v from %q", got.Startup, got.Drain, got.From, tt.wantStartup, tt.wantDrain, tt.wantFrom)
			}
			if got.Drain <= 0 || got.Startup < 0 {
				t.Errorf("timeDrain gave a drain of %v after a start-up of %v", got.Drain, got.Startup)
			}
		})
	}
}

// A drain that ended no later than its launch (or was never launched or
// ended) has no time to report: an error, not a zero or negative drain.
func TestTimeDrainRefusesADrainWithoutDuration(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		s    streamSighting
		end  time.Time
	}{
		{"ended at launch", streamSighting{Launched: t0, Seen: t0}, t0},
		{"ended before launch", streamSighting{Launched: t0}, t0.Add(-time.Second)},
		{"never ended", streamSighting{Launched: t0}, time.Time{}},
		{"never launched", streamSighting{Seen: t0}, t0.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := timeDrain(tt.s, tt.end)
			if err == nil || !strings.Contains(err.Error(), "has no duration") {
				t.Errorf("timeDrain = %+v, %v; want an error saying the drain has no duration", got, err)
			}
		})
	}
}
