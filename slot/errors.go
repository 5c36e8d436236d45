package slot

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/lib/field"
)

// Problems with the slot or the publication that retrying cannot fix.
// Errors from this package wrap them with the names involved and what to
// do; match them with errors.Is.
var (
	ErrMissing            = errors.New("replication slot does not exist")
	ErrInvalidated        = errors.New("replication slot was invalidated")
	ErrUnusable           = errors.New("replication slot cannot be used")
	ErrPublicationMissing = errors.New("publication does not exist")
	ErrTableUnusable      = errors.New("table in the publication has no usable outbox columns")
	ErrTableMissing       = errors.New("outbox table does not exist")
	ErrTableNotPublished  = errors.New("publication does not publish the outbox table")
)

// Permanent reports whether err is one of the errors above: retrying the
// same operation cannot succeed until an operator acts.
func Permanent(err error) bool {
	for _, e := range []error{ErrMissing, ErrInvalidated, ErrUnusable, ErrPublicationMissing, ErrTableUnusable, ErrTableMissing, ErrTableNotPublished} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// OtherDatabaseError is the error for a slot of another database of the
// server (st.OtherDatabase): slot names are per server, so the name was
// taken there first. It wraps ErrUnusable.
func OtherDatabaseError(st Status, n field.Names) error {
	return fmt.Errorf("%w: %s belongs to database %q, not to this one (%q): slot names are per server, so two databases on one server need two slot names; "+
		"choose another %s for this database (and leave %s to %q)", ErrUnusable, st.Slot, st.Database, st.CurrentDatabase, n.Of("Slot"), st.Slot, st.Database)
}

func invalidatedError(st Status, n field.Names) error {
	why := "PostgreSQL removed WAL it still needed (max_slot_wal_keep_size)"
	switch st.InvalidationReason {
	case "wal_removed":
	case "rows_removed":
		why = "a standby's slot conflicted with recovery (the primary removed catalog rows it still needed: keep hot_standby_feedback on, " +
			"with a physical slot between the standby and the primary, before creating it again)"
	case "wal_level_insufficient":
		why = "wal_level was lowered below logical (on the primary, for a standby's slot): set wal_level = logical back before creating it again"
	case "":
		if st.Conflicting != nil && *st.Conflicting {
			// PostgreSQL 16 says conflicting without the reason.
			why = "a standby's slot conflicted with recovery: the primary removed catalog rows it still needed (keep hot_standby_feedback on, " +
				"with a physical slot between the standby and the primary), or wal_level was lowered below logical there"
		}
	case "idle_timeout":
		why = "it was idle longer than idle_replication_slot_timeout"
	default:
		why = "PostgreSQL invalidated it"
	}
	return fmt.Errorf("%w: %s (%s): %s, "+
		"so outbox rows may be missing from Kafka; recover as from a lost slot: drop it, then %s (docs/recovery.md)", ErrInvalidated, st.Slot, st.Why(), why, n.Run("run", createSetting(true), backfillSetting("<predicate>")))
}

// InUseError is START_REPLICATION's answer while another process streams
// from the slot (SQLSTATE 55006, object_in_use).
type InUseError struct {
	Slot string
	PID  int // the holder's pid from pg_replication_slots.active_pid; 0 when it had already let go
	// Holder is the holder's application_name (outboxd's: AppName), where
	// this role may see it.
	Holder string
	Err    error
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("replication slot %s is active in another process (pid %d)", e.Slot, e.PID)
}

func (e *InUseError) Unwrap() error { return e.Err }

// ClassifyStart turns an error of START_REPLICATION on the slot into an
// *InUseError (another process holds the slot; PID still to be read), an
// ErrUnusable (SQLSTATE 55000, object_not_in_prerequisite_state: e.g. an
// invalidated slot or one of another database), or returns it unchanged.
func ClassifyStart(slot string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "55006":
		return &InUseError{Slot: slot, Err: err}
	case "55000":
		return fmt.Errorf("starting replication on slot %s: %w: %w", slot, ErrUnusable, err)
	}
	return err
}
