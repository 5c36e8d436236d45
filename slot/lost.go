package slot

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/lib/field"
)

// Lock takes the session advisory lock that serializes creating the slot
// (and the backfill that goes with it) among outboxd processes on the
// database; unlock releases it (closing conn does too).
func Lock(ctx context.Context, conn *pgx.Conn, slot string) (unlock func(), err error) {
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtext($1))`, lockName(slot)); err != nil {
		return nil, fmt.Errorf("taking the lock on creating slot %s: %w", slot, err)
	}
	return func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtext($1))`, lockName(slot))
	}, nil
}

func lockName(slot string) string { return "outboxd slot " + slot }

// RecoveryMargin is how far before the newest acknowledged commit the
// suggested recovery predicate starts: a row's created_at is its
// transaction's start, which precedes its commit.
const RecoveryMargin = 5 * time.Minute

// LostError is the error for a missing slot, wrapping ErrMissing. With a
// record (found), the slot existed and was lost: the message says so, says
// that what was committed since is in no slot, and gives the recovery
// command with a suggested predicate. Without one it asks for migrate (a
// fresh install) or a backfill (a table that already holds rows).
func LostError(slot string, rec Record, found bool, systemID string, timeline int32, n field.Names) error {
	if !found {
		return fmt.Errorf("%w: %s: run `outboxd migrate` to create it on a fresh install; if the outbox table already holds rows "+
			"that must be published (a cutover from a polling relay), create it with %s instead "+
			"(e.g. \"published_at IS NULL\")", ErrMissing, slot, n.Run("run", createSetting(true), backfillSetting("<predicate>")))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: it was created by %s at %s on system %s timeline %d and is gone",
		slot, rec.CreatedBy, rec.CreatedAt.UTC().Format(time.RFC3339), rec.SystemID, rec.Timeline)
	if rec.SystemID != systemID || rec.Timeline != timeline {
		fmt.Fprintf(&b, " (this server is system %s timeline %d: a failover to a standby without the slot, or a restore; "+
			"on PostgreSQL 17+ a failover slot synchronized to the standby survives a failover: docs/recovery.md, Failover slots)", systemID, timeline)
	} else {
		b.WriteString(" (dropped, or never carried over to this server)")
	}
	b.WriteString(": outbox rows committed since it vanished are in no slot and were not published. ")
	since := rec.CreatedAt.Add(-RecoveryMargin)
	if !rec.AcknowledgedCommitTime.IsZero() {
		since = rec.AcknowledgedCommitTime.Add(-RecoveryMargin)
		fmt.Fprintf(&b, "Kafka acknowledged commits up to %s. ", rec.AcknowledgedCommitTime.UTC().Format(time.RFC3339Nano))
	}
	pred := fmt.Sprintf("created_at >= '%s'", since.UTC().Format(time.RFC3339))
	if rec.BackfillPending() {
		fmt.Fprintf(&b, "Its backfill (%s) had not finished either: its rows are owed too. ", rec.BackfillWhere)
		pred = "(" + rec.BackfillWhere + ") OR " + pred
	}
	fmt.Fprintf(&b, "To publish what may be missing and start a new slot with no gap, run:\n"+
		"  %s\n"+
		"(a predicate on the outbox table, whose rows must still be there; rows it matches that were published already are sent again, so make it as narrow as you safely can, and wider if a transaction may have run longer than %s)",
		n.Line("run", createSetting(true), backfillSetting(pred)), RecoveryMargin)
	return fmt.Errorf("%w: %s", ErrMissing, b.String())
}
