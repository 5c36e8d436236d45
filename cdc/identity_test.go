package cdc

import (
	"context"
	"testing"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// Regression (issue 37): the exactly-once progress key was identified on a
// connection of its own, apart from the stream: a failover in between put
// another timeline in the key than the records' own. Server answers what
// the stream's replication connection identified, and never connects: here
// the database URL reaches nothing.
func TestServerIsTheStreamsOwnIdentity(t *testing.T) {
	t.Parallel()
	s := &Streamer{cfg: Config{DatabaseURL: "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=1"}}
	early, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, _, err := s.Server(early); err == nil {
		t.Fatal("Server answered before a replication connection identified the server")
	}
	s.ident.set(slot.ServerID{SystemID: "7001", Timeline: 3}, 0x5000)
	sys, tl, walEnd, err := s.Server(t.Context())
	if err != nil || sys != "7001" || tl != 3 || walEnd != 0x5000 {
		t.Fatalf("Server = %s, %d, %s, %v; want the stream's 7001, timeline 3, WAL end 0/5000", sys, tl, walEnd, err)
	}
	s.ident.set(slot.ServerID{SystemID: "7001", Timeline: 4}, 0x6000) // the next session's
	if _, tl, _, _ := s.Server(t.Context()); tl != 4 {
		t.Errorf("Server's timeline %d after the next session identified timeline 4", tl)
	}
}

// Regression (issue 37): a position carried over from an earlier session
// was trusted after the server's storage was rolled back without a new
// timeline: replication started past the server's WAL end, and the
// commits the server then wrote below that position were skipped.
func TestCarriedPositionMustFitTheServersWAL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		carried, walEnd outbox.LSN
		onStandby       bool
		fits            bool
	}{
		{"nothing carried", 0, 0x100, false, true},
		{"behind the WAL end", 0x80, 0x100, false, true},
		{"at the WAL end", 0x100, 0x100, false, true},
		{"past the WAL end: storage rolled back", 0x180, 0x100, false, false},
		// Issue 52: a standby that restarted is still replaying; its WAL
		// end trails what was confirmed on it, and the slot's own
		// position went back to its last restartpoint.
		{"past a standby's WAL end: still replaying", 0x180, 0x100, true, true},
	} {
		if got := carriedFits(tc.carried, tc.walEnd, tc.onStandby); got != tc.fits {
			t.Errorf("%s: carriedFits(%s, %s) = %v, want %v", tc.name, tc.carried, tc.walEnd, got, tc.fits)
		}
	}
}

// Regression (issue 52, found by make chaos-standby): after a crash of the
// standby it decodes on, a new exactly-once process found the progress
// topic past the standby's WAL end (still replaying) and stopped, taking
// it for storage rolled back.
func TestAStandbysWALEndBoundsNoProgress(t *testing.T) {
	t.Parallel()
	if got := walEndBound(0x100, true); got != 0 {
		t.Errorf("walEndBound on a standby = %s, want 0 (no bound)", got)
	}
	if got := walEndBound(0x100, false); got != 0x100 {
		t.Errorf("walEndBound on a primary = %s, want 0/100", got)
	}
}

// Regression (issue 37, review): a backfill identified its server for the
// exactly-once sink but not for the next session's comparison, so a
// failover between the backfill and the first session went unnoticed: the
// sink kept the backfill's progress key while the records came from
// another timeline. What a backfill identifies is what the next session
// compares with.
func TestBackfillsServerIsComparedByTheFirstSession(t *testing.T) {
	t.Parallel()
	s := &Streamer{}
	s.ident.set(slot.ServerID{SystemID: "7001", Timeline: 1, Database: "app"}, 0x5000) // as createSlotWithBackfill does
	_, err := serverChange(s.ident.get(), slot.ServerID{SystemID: "7001", Timeline: 2, Database: "app"}, slot.Status{ServerVersion: 170006}, "s", true, false, field.Names{})
	if err == nil {
		t.Error("a server change between the backfill and the first session went unnoticed in exactly-once mode")
	}
}
