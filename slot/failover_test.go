package slot

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestFailoverModeCreateFailover(t *testing.T) {
	for _, tc := range []struct {
		mode    FailoverMode
		version int
		want    bool
		err     bool
	}{
		{FailoverAuto, 150018, false, false},
		{FailoverAuto, 160010, false, false},
		{FailoverAuto, 170006, true, false},
		{FailoverAuto, 180001, true, false},
		{FailoverOn, 170006, true, false},
		{FailoverOn, 160010, false, true},
		{FailoverOff, 180001, false, false},
		{FailoverOff, 150018, false, false},
	} {
		got, err := tc.mode.CreateFailover(tc.version, flagNames)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s.CreateFailover(%d) = %v, %v; want %v, error %v", tc.mode, tc.version, got, err, tc.want, tc.err)
		}
		if err != nil && (!errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), "16.10")) {
			t.Errorf("%s.CreateFailover(%d) error %q: want ErrUnusable naming the version", tc.mode, tc.version, err)
		}
	}
}

func TestFailoverModeAlterFailover(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		mode     FailoverMode
		failover *bool
		want     bool
		offered  bool
	}{
		{FailoverAuto, &no, false, true},
		{FailoverAuto, &yes, false, false},
		{FailoverAuto, nil, false, false}, // before 17: no such column
		{FailoverOn, &no, true, false},
		{FailoverOn, &yes, false, false},
		{FailoverOn, nil, false, false},
		{FailoverOff, &no, false, false},
	} {
		var log bytes.Buffer
		got := tc.mode.AlterFailover(Status{Slot: "s", Failover: tc.failover}, flagNames, slog.New(slog.NewTextHandler(&log, nil)))
		offered := strings.Contains(log.String(), "--failover-slot=on")
		if got != tc.want || offered != tc.offered {
			t.Errorf("%s.AlterFailover(failover %v) = %v, offered %v; want %v, offered %v", tc.mode, deref(boolText(tc.failover)), got, offered, tc.want, tc.offered)
		}
	}
}

func boolText(b *bool) *string {
	if b == nil {
		return nil
	}
	s := "false"
	if *b {
		s = "true"
	}
	return &s
}

func TestParseFailoverMode(t *testing.T) {
	for _, s := range []string{"auto", "on", "off"} {
		if m, err := ParseFailoverMode(s); err != nil || string(m) != s {
			t.Errorf("ParseFailoverMode(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "yes", "true", "AUTO"} {
		if _, err := ParseFailoverMode(s); err == nil {
			t.Errorf("ParseFailoverMode(%q) accepted", s)
		}
	}
}

func TestSyncedAcrossFailover(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		version int
		synced  *bool
		want    bool
	}{
		{150018, nil, true},  // a slot on a new timeline came with a restore
		{160010, nil, false}, // could have been created on the standby
		{170006, &no, false},
		{170006, &yes, true},
		{180001, nil, false},
	} {
		if got := SyncedAcrossFailover(Status{ServerVersion: tc.version, Synced: tc.synced}); got != tc.want {
			t.Errorf("SyncedAcrossFailover(%d, synced %v) = %v, want %v", tc.version, deref(boolText(tc.synced)), got, tc.want)
		}
	}
}

func TestStatusLost(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name string
		st   Status
		want bool
		why  string
	}{
		{"reserved", Status{WALStatus: "reserved"}, false, ""},
		{"wal removed (15)", Status{WALStatus: "lost"}, true, "wal_status lost"},
		{"conflicting (16)", Status{WALStatus: "reserved", Conflicting: &yes}, true, "conflicting"},
		{"not conflicting (16)", Status{WALStatus: "reserved", Conflicting: &no}, false, ""},
		{"rows removed (17)", Status{WALStatus: "reserved", Conflicting: &yes, InvalidationReason: "rows_removed"}, true, "invalidation_reason rows_removed"},
		{"idle timeout (18)", Status{WALStatus: "lost", Conflicting: &no, InvalidationReason: "idle_timeout"}, true, "invalidation_reason idle_timeout"},
	} {
		if got := tc.st.Lost(); got != tc.want {
			t.Errorf("%s: Lost() = %v, want %v", tc.name, got, tc.want)
		}
		if tc.want {
			if why := tc.st.Why(); why != tc.why {
				t.Errorf("%s: Why() = %q, want %q", tc.name, why, tc.why)
			}
			if err := invalidatedError(tc.st, flagNames); !errors.Is(err, ErrInvalidated) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("%s: invalidatedError = %v", tc.name, err)
			}
		}
	}
}

// A standby is refused at start (the caller makes it permanent) but is not
// one of the Permanent errors: a running process that lands on a standby
// during a failover retries until it is promoted.
func TestStandbyErrorIsRetriedBySessions(t *testing.T) {
	err := StandbyError("s", flagNames)
	if !errors.Is(err, ErrStandby) || Permanent(err) {
		t.Errorf("StandbyError: errors.Is(ErrStandby) = %v, Permanent = %v; want true, false", errors.Is(err, ErrStandby), Permanent(err))
	}
	for _, s := range []string{"standby", "target_session_attrs=read-write"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("StandbyError does not say %q: %v", s, err)
		}
	}
}
