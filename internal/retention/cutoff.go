// Package retention keeps the outbox table small once its rows are no
// longer needed (outboxd prune): it drops the whole day partitions of a
// partitioned outbox, and deletes rows in small batches from a plain table
// or a DEFAULT partition; it creates the day partitions ahead.
//
// Invariant: it removes only rows whose created_at (or the configured
// column, set at insert to at most the commit time, as DEFAULT now() is) is
// before the cutoff, and the cutoff is never later than
//   - now minus the age asked for, and
//   - the commit time up to which Kafka acknowledged every record of the
//     slot (outboxd_slots.acknowledged_commit_time, which run records),
//     minus the recovery margin: a lost slot's recovery backfills from
//     that point (slot.LostError suggests created_at >= it), so those rows
//     must still be in the table, as must every row not yet published.
//
// It removes nothing while the slot is missing (lost: its recovery needs
// the rows), while the slot's backfill is unfinished, or before run ever
// recorded an acknowledgment. Cutoff is pure; Prune does the I/O.
package retention

import (
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/slot"
)

// Why nothing may be removed.
var (
	ErrSlotMissing     = errors.New("the slot does not exist")
	ErrNoRecord        = errors.New("outboxd_slots has no record of the slot")
	ErrNeverAcked      = errors.New("run never recorded an acknowledgment for the slot")
	ErrBackfillPending = errors.New("the slot's backfill is unfinished")
)

// Cutoff returns the time before which rows may be removed, and why it is
// that time. rec and found are the slot's outboxd_slots record; exists says
// whether the slot is on the server. The error says why nothing may be
// removed (it wraps one of the Err values).
func Cutoff(now time.Time, olderThan, margin time.Duration, rec slot.Record, found, exists bool) (time.Time, string, error) {
	since := rec.AcknowledgedCommitTime
	if since.IsZero() {
		since = rec.CreatedAt
	}
	switch {
	case !exists && found:
		return time.Time{}, "", fmt.Errorf("%w: it is lost, and recovering it (outboxd run --create-slot --backfill-where) reads the rows since %s from the table: recover first",
			ErrSlotMissing, since.Add(-margin).UTC().Format(time.RFC3339))
	case !exists:
		return time.Time{}, "", fmt.Errorf("%w: nothing tells which rows were published (run `outboxd migrate` to create it, or give --slot)", ErrSlotMissing)
	case !found:
		return time.Time{}, "", fmt.Errorf("%w: run `outboxd run` (it records the slot and what Kafka acknowledged) before pruning", ErrNoRecord)
	case rec.BackfillPending():
		return time.Time{}, "", fmt.Errorf("%w (%s): its rows are owed to Kafka; let run finish it first", ErrBackfillPending, rec.BackfillWhere)
	case rec.AcknowledgedCommitTime.IsZero():
		return time.Time{}, "", fmt.Errorf("%w: run records it at each WAL check (--wal-check-interval) once Kafka acknowledged a transaction", ErrNeverAcked)
	}
	byAge := now.Add(-olderThan)
	byAck := rec.AcknowledgedCommitTime.Add(-margin)
	if byAck.Before(byAge) {
		return byAck, fmt.Sprintf("Kafka acknowledged commits up to %s, less the recovery margin %s (older rows are published; newer ones may be owed, or needed by a recovery)",
			rec.AcknowledgedCommitTime.UTC().Format(time.RFC3339Nano), margin), nil
	}
	return byAge, fmt.Sprintf("older than %s (and Kafka acknowledged commits up to %s)", olderThan,
		rec.AcknowledgedCommitTime.UTC().Format(time.RFC3339Nano)), nil
}
