package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/outboxd/outboxd/lib/field"
)

// Failover slots (PostgreSQL 17+): a logical slot created with FAILOVER
// true is copied to standbys that run with sync_replication_slots = on,
// so that after a failover to such a standby the slot is there, at a
// position no later than what that standby received, and streaming goes
// on with no recovery. A slot without it is gone after a failover (see
// LostError).

// FailoverVersion is the first server_version_num with failover slots.
const FailoverVersion = 170000

// FailoverMode chooses whether the slot is a failover slot.
type FailoverMode string

// Failover modes.
const (
	// FailoverAuto creates the slot as a failover slot where the server
	// supports it (17+), and only logs how to turn it on for an existing
	// slot that is not one.
	FailoverAuto FailoverMode = "auto"
	// FailoverOn does the same and also turns failover on for an existing
	// slot (ALTER_REPLICATION_SLOT, while no process streams from it); on a
	// server before 17 it is an error.
	FailoverOn FailoverMode = "on"
	// FailoverOff creates a slot without failover and leaves an existing
	// one as it is.
	FailoverOff FailoverMode = "off"
)

// ParseFailoverMode parses auto, on or off.
func ParseFailoverMode(s string) (FailoverMode, error) {
	switch m := FailoverMode(s); m {
	case FailoverAuto, FailoverOn, FailoverOff:
		return m, nil
	}
	return "", fmt.Errorf("failover slot mode %q: want auto, on or off", s)
}

// CreateFailover says whether a slot created now on a server of version
// (server_version_num) is a failover slot; FailoverOn before 17 is an
// error wrapping ErrUnusable.
func (m FailoverMode) CreateFailover(version int, n field.Names) (bool, error) {
	switch {
	case m == FailoverOff:
		return false, nil
	case version >= FailoverVersion:
		return true, nil
	case m == FailoverOn:
		return false, fmt.Errorf("%w: %s needs PostgreSQL 17 or later (this server is %s): use %s or %s",
			ErrUnusable, n.Set(failoverSetting(FailoverOn)), versionName(version), n.Set(failoverSetting(FailoverAuto)), n.Set(failoverSetting(FailoverOff)))
	}
	return false, nil
}

// AlterFailover says whether to turn failover on for the existing slot st,
// logging the offer where the mode only offers it.
func (m FailoverMode) AlterFailover(st Status, n field.Names, log *slog.Logger) bool {
	if m == FailoverOff || st.Failover == nil || *st.Failover {
		return false
	}
	if m == FailoverOn {
		return true
	}
	log.Warn("the slot is not a failover slot: a failover to a standby loses it (then see the recovery command); "+
		"start once with "+n.Set(failoverSetting(FailoverOn))+" to turn failover on (PostgreSQL 17+, with sync_replication_slots on the standby: docs/recovery.md, Failover slots)",
		"slot", st.Slot)
	return false
}

// ErrStandby: the server is a standby (in recovery). It is not one of the
// Permanent errors: during a failover a connection can land on a standby
// that is about to be promoted, and a running process retries; a start
// against a standby is refused (the caller makes it permanent).
var ErrStandby = errors.New("the server is a standby (in recovery)")

// StandbyError is the refusal to run against a standby of a PostgreSQL
// before 16, which cannot decode (NoPrimaryError is 16+'s).
func StandbyError(slot string, n field.Names) error {
	return fmt.Errorf("%w: outboxd streams from the primary only on this server (slot %s): decoding on a standby needs PostgreSQL 16 or later. "+
		"Point %s at the primary; with several hosts, add target_session_attrs=read-write", ErrStandby, slot, n.Of("DatabaseURL"))
}

// SyncedAcrossFailover reports whether the slot st, found on a new
// timeline of the system it was on (a promoted standby), can be trusted
// to continue from. From 16 a logical slot can be created on a standby
// (decoding on a standby), so a slot there may be one nobody synchronized:
// only 17's synced flag says it was copied from the old primary's. Before
// 16 a slot on a new timeline came with a restore of the data directory,
// which carries the slot's own history: trusted as before.
func SyncedAcrossFailover(st Status) bool {
	if st.ServerVersion < 160000 {
		return true
	}
	return st.Synced != nil && *st.Synced
}

// TrustedAcrossTimeline reports whether the slot st, found on a new
// timeline of the system it was on, can be continued from: a slot
// synchronized from the old primary (SyncedAcrossFailover), or one on the
// standby outboxd decodes on (decodingOnStandby: the slot was created and
// confirmed on that very server, which was promoted or followed a new
// timeline; a slot on another standby of the system is not at its URL).
func TrustedAcrossTimeline(st Status, decodingOnStandby bool) bool {
	return decodingOnStandby || SyncedAcrossFailover(st)
}

// UnsyncedError refuses a slot found on a new timeline of the recorded
// system (a promoted standby) that was not synchronized from the old
// primary: whatever it holds was not the position outboxd confirmed there,
// so streaming from it could skip or invent commits.
func UnsyncedError(slot string, rec Record, timeline int32, version int, n field.Names) error {
	why := "pg_replication_slots.synced is false, so its position is not the one outboxd confirmed there"
	after := "Make it a failover slot (" + n.Set(failoverSetting(FailoverOn)) + ") so the next failover needs none of this"
	if version < FailoverVersion {
		why = "PostgreSQL 16 cannot tell a slot carried over by a restore from one created on the standby (decoding on a standby), " +
			"whose position is not the one outboxd confirmed there"
		after = "PostgreSQL 17's failover slots are carried over with a synced flag"
	}
	return fmt.Errorf("%w: %s exists on this server (system %s timeline %d) but was not synchronized from the primary it was recorded on "+
		"(timeline %d): %s. Drop it, then recover as from a lost slot: %s "+
		"(docs/recovery.md). %s",
		ErrUnusable, slot, rec.SystemID, timeline, rec.Timeline, why, n.Line("run", createSetting(true), backfillSetting("created_at >= '<time before the failover>'")), after)
}

// ServerVersion reads server_version_num (150000 for 15.0).
func ServerVersion(ctx context.Context, q Querier) (int, error) {
	var v int
	if err := q.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the server version: %w", err)
	}
	return v, nil
}
