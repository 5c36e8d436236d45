package cdc

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/slot"
)

// serverChange's decisions across a failover, a restore and an old
// primary's return (issue 15), without servers.
func TestServerChange(t *testing.T) {
	yes, no := true, false
	t1 := slot.ServerID{SystemID: "7001", Timeline: 1}
	t2 := slot.ServerID{SystemID: "7001", Timeline: 2}
	other := slot.ServerID{SystemID: "8002", Timeline: 1}
	synced17 := slot.Status{ServerVersion: 170006, Synced: &yes}
	unsynced17 := slot.Status{ServerVersion: 170006, Synced: &no}
	for _, tc := range []struct {
		name         string
		prev, now    slot.ServerID
		info         slot.Status
		stopOnChange bool
		onStandby    bool // decoding on a standby (a primary URL)
		changed      bool
		err          string // substring; "" for none
	}{
		{"first session", slot.ServerID{}, t1, unsynced17, false, false, false, ""},
		{"same server", t1, t1, unsynced17, true, false, false, ""},
		{"promoted standby, synchronized slot", t1, t2, synced17, false, false, true, ""},
		{"promoted standby, slot not synchronized (17)", t1, t2, unsynced17, false, false, true, "synced is false"},
		{"promoted standby, slot on 16", t1, t2, slot.Status{ServerVersion: 160010}, false, false, true, "PostgreSQL 16 cannot tell"},
		{"restore on 15 keeps its slot", t1, t2, slot.Status{ServerVersion: 150018}, false, false, true, ""},
		{"old primary back", t2, t1, synced17, false, false, true, "old primary that came back"},
		{"another cluster", t1, other, unsynced17, false, false, true, ""},
		{"exactly-once stops on any change", t1, t2, synced17, true, false, true, "exactly-once mode stops"},
		{"exactly-once, old primary back", t2, t1, synced17, true, false, true, "old primary that came back"},
		// Issue 52: the standby outboxd decodes on was promoted (16 and 17
		// alike): its slot is the one outboxd confirmed on.
		{"decoding standby promoted, 16", t1, t2, slot.Status{ServerVersion: 160010}, false, true, true, ""},
		{"decoding standby promoted, 17", t1, t2, unsynced17, false, true, true, ""},
		{"decoding standby promoted, exactly-once stops", t1, t2, unsynced17, true, true, true, "exactly-once mode stops"},
		{"decoding standby, old primary back", t2, t1, unsynced17, false, true, true, "old primary that came back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed, err := serverChange(tc.prev, tc.now, tc.info, "s", tc.stopOnChange, tc.onStandby, field.Names{})
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one saying %q", err, tc.err)
			case err != nil && !errors.Is(err, slot.ErrUnusable) && !tc.stopOnChange:
				t.Errorf("error %v does not wrap slot.ErrUnusable", err)
			}
		})
	}
}
