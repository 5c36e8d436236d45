package slot

import (
	"errors"
	"strings"
	"testing"
)

// Issue 52: a standby is checked before a slot is created or streamed
// there, every problem at once, each with its fix.
func TestCheckStandby(t *testing.T) {
	t.Parallel()
	active := true
	good := StandbyFacts{Version: 160004, HotStandbyFeedback: true, PrimarySlotName: "standby_1", Receiving: true, ReceiverSlot: "standby_1",
		StandbyWALLevel: "logical", PrimaryWALLevel: "logical", PhysicalSlotActive: &active}
	for _, tc := range []struct {
		name string
		edit func(*StandbyFacts)
		want error
		says []string
	}{
		{name: "ready", edit: func(*StandbyFacts) {}},
		{name: "PostgreSQL 15", edit: func(f *StandbyFacts) { f.Version = 150010 },
			want: ErrUnsupportedVersion, says: []string{"PostgreSQL 15.10", "16 or later", "--database-url"}},
		{name: "hot_standby_feedback off", edit: func(f *StandbyFacts) { f.HotStandbyFeedback = false },
			want: ErrStandbyUnsafe, says: []string{"hot_standby_feedback = on", "rows_removed"}},
		{name: "no physical slot", edit: func(f *StandbyFacts) { f.PrimarySlotName, f.ReceiverSlot, f.PhysicalSlotActive = "", "", nil },
			want: ErrStandbyUnsafe, says: []string{"without a physical replication slot", "primary_slot_name"}},
		{name: "the primary lacks the named slot", edit: func(f *StandbyFacts) { f.PhysicalSlotActive = nil },
			want: ErrStandbyUnsafe, says: []string{"primary has no physical slot of that name", "pg_create_physical_replication_slot('standby_1')"}},
		{name: "primary wal_level replica", edit: func(f *StandbyFacts) { f.PrimaryWALLevel = "replica" },
			want: ErrStandbyUnsafe, says: []string{"primary runs with wal_level=replica"}},
		{name: "standby wal_level replica", edit: func(f *StandbyFacts) { f.StandbyWALLevel = "replica" },
			want: ErrStandbyUnsafe, says: []string{"standby runs with wal_level=replica"}},
		{name: "primary URL on a standby", edit: func(f *StandbyFacts) { f.PrimaryInRecovery = true },
			want: ErrStandbyUnsafe, says: []string{"--primary-url reaches a server in recovery", "target_session_attrs=read-write"}},
		{name: "every problem at once", edit: func(f *StandbyFacts) {
			f.HotStandbyFeedback, f.PrimaryWALLevel, f.PrimarySlotName, f.ReceiverSlot, f.PhysicalSlotActive = false, "replica", "", "", nil
		}, want: ErrStandbyUnsafe, says: []string{"hot_standby_feedback", "wal_level=replica", "physical replication slot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := good
			tc.edit(&f)
			err := CheckStandby(f, flagNames)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckStandby = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("CheckStandby = %v, want %v", err, tc.want)
			}
			for _, w := range tc.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckStandby does not say %q: %v", w, err)
				}
			}
		})
	}
}
