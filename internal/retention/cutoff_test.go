package retention

import (
	"errors"
	"testing"
	"time"

	"github.com/outboxd/outboxd/slot"
)

func TestCutoff(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	acked := func(at time.Time) slot.Record { return slot.Record{Slot: "s", AcknowledgedCommitTime: at} }
	tests := []struct {
		name          string
		older, margin time.Duration
		rec           slot.Record
		found, exists bool
		want          time.Time
		err           error
	}{
		{name: "the age decides: Kafka is up to date", older: 7 * 24 * time.Hour, margin: 5 * time.Minute,
			rec: acked(now.Add(-time.Second)), found: true, exists: true, want: now.Add(-7 * 24 * time.Hour)},
		// The publisher has been stopped for ten days: nothing committed
		// since (all after the acknowledged commit) may go.
		{name: "the acknowledgment decides: a publisher stopped for long", older: 7 * 24 * time.Hour, margin: 5 * time.Minute,
			rec: acked(now.Add(-10 * 24 * time.Hour)), found: true, exists: true, want: now.Add(-10*24*time.Hour - 5*time.Minute)},
		{name: "the margin counts against the acknowledgment", older: time.Hour, margin: 5 * time.Minute,
			rec: acked(now.Add(-58 * time.Minute)), found: true, exists: true, want: now.Add(-63 * time.Minute)},
		{name: "no margin", older: time.Second, rec: acked(now.Add(-time.Minute)), found: true, exists: true, want: now.Add(-time.Minute)},
		{name: "the slot is lost", older: time.Hour, rec: acked(now), found: true, err: ErrSlotMissing},
		{name: "no slot, no record", older: time.Hour, err: ErrSlotMissing},
		{name: "a slot outboxd never recorded", older: time.Hour, exists: true, err: ErrNoRecord},
		{name: "never acknowledged", older: time.Hour, rec: slot.Record{Slot: "s"}, found: true, exists: true, err: ErrNeverAcked},
		{name: "a backfill unfinished", older: time.Hour, rec: slot.Record{Slot: "s", BackfillWhere: "true", AcknowledgedCommitTime: now},
			found: true, exists: true, err: ErrBackfillPending},
		{name: "a backfill finished", older: time.Hour, rec: slot.Record{Slot: "s", BackfillWhere: "true", BackfillDone: true, AcknowledgedCommitTime: now},
			found: true, exists: true, want: now.Add(-time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason, err := Cutoff(now, tt.older, tt.margin, tt.rec, tt.found, tt.exists)
			if tt.err != nil {
				if !errors.Is(err, tt.err) || !got.IsZero() {
					t.Fatalf("Cutoff = %v, %v; want nothing and %v", got, err, tt.err)
				}
				return
			}
			if err != nil || !got.Equal(tt.want) || reason == "" {
				t.Fatalf("Cutoff = %v (%q), %v; want %v with a reason", got, reason, err, tt.want)
			}
			if got.After(now.Add(-tt.older)) || got.After(tt.rec.AcknowledgedCommitTime.Add(-tt.margin)) {
				t.Fatalf("cutoff %v is later than the age or the acknowledgment allows", got)
			}
		})
	}
}
