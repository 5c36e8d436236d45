package outbox

import (
	"strconv"
	"strings"
	"time"
)

// Headers outboxd sets on every record, ahead of the row's own.
const (
	// IDHeader is the first header of every record: the outbox id in text
	// form (see Event.ID).
	IDHeader = "id"
	// SourceHeader names a record's source when the stream's server is
	// known: "<system identifier>/<database>/<schema.table>", or
	// ".../message:<prefix>" for a table-less event. With the id header it
	// is the idempotency key that is unique across sources (package
	// idempotent's SourceAndID): two tables or two databases with the same
	// ids are two sources. The system identifier is the cluster's
	// (pg_control_system()): a physical standby promoted in a failover
	// keeps it, so the source stays the same; a cluster restored from a
	// base backup keeps it as well, while one made by initdb, pg_upgrade
	// or a logical copy has a new one and is a new source. It comes right
	// after the id header, before the row's own headers: a consumer reads
	// the first one of that name.
	SourceHeader = "outboxd.source"
	// TransactionalIDHeader is on the progress records of an exactly-once
	// publisher, naming the transactional id that wrote them: its progress
	// reader trusts a record only with its own. No record of an outbox row
	// or message may carry it, or one pipeline's row could forge another's
	// progress.
	TransactionalIDHeader = "outboxd-transactional-id"
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
	Source string // the SourceHeader's value an event of it would have had; "" when the source is not known
	Err    error  // what is wrong with the value

	// MessageLSN is the LSN of a logical decoding message (a table-less
	// event, Table "message:<prefix>"), zero for a row. Standalone: the
	// message came outside any transaction (non-transactional), so it is
	// in no transaction of the stream; it may be confirmed past once
	// dealt with, at MessageLSN+1.
	MessageLSN LSN
	Standalone bool

	// What could be read of the row, its own bytes: the topic, key and
	// payload columns as they would have been published, where present.
	Topic      string
	Key, Value []byte
	// The row's place in the stream, as an Event would have it.
	CommitTime time.Time
	CommitLSN  LSN
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
