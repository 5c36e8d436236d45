package decode

import (
	"fmt"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// RowError is a problem with one outbox row: a column value that cannot be
// turned into a record (a NULL topic, an id that is not an integer, headers
// that are not a JSON object, ...), or a row of a table without usable
// outbox columns. Callers can use errors.As to report the outbox id and stop
// without skipping the row, or dead-letter it with what could be read.
type RowError struct {
	Table  string // schema-qualified table, e.g. "public.outbox"
	Column string // the column at fault; "" when the table itself is unusable
	ID     int64  // the outbox id; meaningful only when HasID is true
	HasID  bool   // false when the id itself could not be decoded
	Err    error  // what is wrong with the value

	// What could be read of the row, its own bytes: the topic, key and
	// payload columns as they would have been published, where present.
	Topic      string
	Key, Value []byte
	// The row's place in the stream, as an Event would have it.
	CommitTime time.Time
	CommitLSN  outbox.LSN
	Index      int
}

// Error reads like
// `decoding insert into public.outbox: column "topic": null topic (outbox id 42)`.
func (e *RowError) Error() string {
	s := "decoding insert into " + e.Table + ": "
	if e.Column != "" {
		s += "column " + strconv.Quote(e.Column) + ": "
	}
	s += e.Err.Error()
	if e.HasID {
		s += " (outbox id " + strconv.FormatInt(e.ID, 10) + ")"
	}
	return s
}

// Unwrap returns the underlying error.
func (e *RowError) Unwrap() error { return e.Err }

// truncatedError describes a message that ended before a field was complete.
func truncatedError(field string, off int, want uint64, have int) error {
	return fmt.Errorf("truncated at offset %d: %s needs %d bytes, %d left", off, field, want, have)
}

// quoteShort quotes b for an error message, cutting it after 64 bytes.
func quoteShort(b []byte) string {
	const max = 64
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}

// constError is an error that can be a constant.
type constError string

func (e constError) Error() string { return string(e) }
