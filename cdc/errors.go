package cdc

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// PermanentError is an error that retrying cannot fix: Run returns it.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

func permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is (or wraps) a PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// slotInUseError is START_REPLICATION's answer while another process
// streams from the slot.
type slotInUseError struct {
	slot string
	pid  int // 0 when the server did not say
	err  error
}

func (e *slotInUseError) Error() string {
	return fmt.Sprintf("replication slot %s is active in another process (pid %d)", e.slot, e.pid)
}
func (e *slotInUseError) Unwrap() error { return e.err }

var activePID = regexp.MustCompile(`active for PID (\d+)`)

// asSlotInUse recognizes SQLSTATE 55006 (object_in_use) on the slot.
func asSlotInUse(slot string, err error) (*slotInUseError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55006" {
		return nil, false
	}
	e := &slotInUseError{slot: slot, err: err}
	if m := activePID.FindStringSubmatch(pgErr.Message); m != nil {
		e.pid, _ = strconv.Atoi(m[1])
	}
	return e, true
}

// redactURLError drops the text of a URL parse error, which can quote the
// whole connection string, password included.
func redactURLError(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New("invalid connection string (not shown: it may hold a password)")
	}
	return err
}

// isObjectNotInPrerequisiteState recognizes SQLSTATE 55000, which
// START_REPLICATION answers for a slot that cannot be used (invalidated,
// wrong database): retrying will not help.
func isObjectNotInPrerequisiteState(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55000"
}
