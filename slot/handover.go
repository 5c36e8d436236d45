package slot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Hand-over records (migration 0013): what the replicas of a fleet tell
// each other about a slot, written in outboxd_slots, which only outboxd's
// role may write, so that a notification (which any role of the database
// may send) is acted on only when the record backs it.

// ErrNoHandoverRecords is the answer of a catalog that predates migration
// 0013: hand-overs need `outboxd migrate`.
var ErrNoHandoverRecords = errors.New("outboxd_slots has no hand-over columns: run `outboxd migrate` (migration 0013) so that replicas hand pipelines over")

// RequestHandover records that replica asks for slot back.
func RequestHandover(ctx context.Context, q Querier, slot string, replica int) error {
	return handoverWrite(q.Exec(ctx, `UPDATE outboxd_slots SET handover_at = now(), handover_by = $2 WHERE slot_name = $1`, slot, replica))
}

// HandoverRequested reports whether a replica other than replica asked
// for slot within the last within, and which.
func HandoverRequested(ctx context.Context, q Querier, slot string, replica int, within time.Duration) (bool, int, error) {
	var by *int32
	var fresh bool
	err := q.QueryRow(ctx, `SELECT coalesce(handover_at > now() - make_interval(secs => $2), false), handover_by FROM outboxd_slots WHERE slot_name = $1`,
		slot, within.Seconds()).Scan(&fresh, &by)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, 0, nil
	case err != nil:
		return false, 0, handoverRead(err)
	case by == nil || !fresh || int(*by) == replica:
		return false, 0, nil
	}
	return true, int(*by), nil
}

// RecordRelease records that slot was let go gracefully, for replica to
// take over at once.
func RecordRelease(ctx context.Context, q Querier, slot string, to int) error {
	return handoverWrite(q.Exec(ctx, `UPDATE outboxd_slots SET released_at = now(), released_to = $2 WHERE slot_name = $1`, slot, to))
}

// ReleasedTo reports whether slot was let go gracefully for replica within
// the last within.
func ReleasedTo(ctx context.Context, q Querier, slot string, replica int, within time.Duration) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT coalesce(released_at > now() - make_interval(secs => $2) AND released_to = $3, false) FROM outboxd_slots WHERE slot_name = $1`,
		slot, within.Seconds(), replica).Scan(&ok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, handoverRead(err)
	}
	return ok, nil
}

func handoverWrite(_ pgconn.CommandTag, err error) error {
	if err == nil {
		return nil
	}
	return handoverRead(err)
}

func handoverRead(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42703", "42P01": // undefined_column, undefined_table
			return ErrNoHandoverRecords
		case "42501":
			return fmt.Errorf("%w: %w", ErrCatalogDenied, err)
		}
	}
	return fmt.Errorf("reading or writing outboxd_slots' hand-over record: %w", err)
}
