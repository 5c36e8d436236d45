package main

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/slot"
)

// Issue 49, item 28: a second `run` on the same slot with other settings
// looked like a healthy standby, and would later take over with its own
// settings; every connection was named just outboxd. The stream's
// connections carry a fingerprint of the settings (application_name), and
// a standby warns when the slot's holder runs other ones.
func TestAStandbyWithOtherSettingsWarns(t *testing.T) {
	t.Parallel()
	const warning = "runs other settings than this one"
	tests := []struct {
		name  string
		extra []string // the standby's settings beside the holder's
		warns bool
	}{
		{name: "same settings", warns: false},
		{name: "another compression", extra: []string{"--compression", "zstd"}, warns: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			// Both retry a busy slot often: the standby's retries come
			// quickly, and its settings differ only by extra.
			w.start(t, "--slot-retry-interval", "100ms")
			want := w.write(t, 1, 0)
			w.consumeAll(t, want, time.Minute)
			var holder string
			waitFor(t, 30*time.Second, "the holder in pg_stat_replication", func() bool {
				err := w.pool.QueryRow(t.Context(), `SELECT coalesce((SELECT application_name FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid
					WHERE s.slot_name = $1), '')`, w.slot).Scan(&holder)
				return err == nil && holder != ""
			})
			name, ok := slot.ParseAppName(holder)
			if !ok || name.Settings == "" || name.Pipeline != "" || name.Replica != -1 {
				t.Fatalf("the stream's application_name is %q (parsed %+v, %v), want outboxd's with a settings fingerprint", holder, name, ok)
			}
			second := w.start(t, append([]string{"--slot-retry-interval", "100ms"}, tt.extra...)...)
			waitFor(t, 30*time.Second, "the standby standing by", func() bool { return strings.Contains(second.log(), "in use by another process") })
			// Retries after the first: a warning, if any, came with it.
			time.Sleep(10 * 100 * time.Millisecond)
			log := second.log()
			if got := strings.Contains(log, warning); got != tt.warns {
				t.Fatalf("the standby warned of other settings: %v, want %v; its log:\n%s", got, tt.warns, log)
			}
			if n := strings.Count(log, warning); n > 1 {
				t.Errorf("the warning came %d times, want once:\n%s", n, log)
			}
			if !strings.Contains(log, `holder="`+holder+`"`) {
				t.Errorf("the standby's log does not name the holder %q:\n%s", holder, log)
			}
		})
	}
}
