package decode

import (
	"fmt"
	"strconv"
	"strings"
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
	ID     string // the outbox id in text form; "" when it could not be decoded
	Source string // the SourceHeader's value an event of it would have had; "" without Columns.Source
	Err    error  // what is wrong with the value

	// MessageLSN is the LSN of a logical decoding message (a table-less
	// event, Table "message:<prefix>"), zero for a row. Standalone: the
	// message came outside any transaction (non-transactional), so it is
	// in no transaction of the stream; it may be confirmed past once
	// dealt with, at MessageLSN+1.
	MessageLSN outbox.LSN
	Standalone bool

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
	if e.MessageLSN != 0 {
		s = "decoding logical decoding message " + strings.TrimPrefix(e.Table, "message:") + " at " + e.MessageLSN.String() + ": "
	}
	if e.Column != "" {
		s += "column " + strconv.Quote(e.Column) + ": "
	}
	s += e.Err.Error()
	if e.ID != "" && e.MessageLSN == 0 { // a message's id is its LSN, said above
		s += " (outbox id " + e.ID + ")"
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
