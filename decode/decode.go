package decode

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// LSN is a PostgreSQL log sequence number.
type LSN = pglogrepl.LSN

// Kind says what a decoded [Message] is.
type Kind uint8

// The kinds of decoded messages.
const (
	KindIgnored Kind = iota // Relation, Type, Origin, Update, Delete, Truncate, Message...: nothing to publish
	KindBegin               // a transaction starts
	KindEvent               // an insert into an outbox table: publish Message.Event
	KindCommit              // the transaction ends; Message.EndLSN may be confirmed once all its events are
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindIgnored:
		return "ignored"
	case KindBegin:
		return "begin"
	case KindEvent:
		return "event"
	case KindCommit:
		return "commit"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Message is one decoded pgoutput message. Which fields are set depends on Kind.
type Message struct {
	Kind       Kind
	Xid        uint32    // Begin
	FinalLSN   LSN       // Begin: LSN of the commit record (pglogrepl BeginMessage.FinalLSN)
	CommitTime time.Time // Begin and Commit: the transaction's commit time
	CommitLSN  LSN       // Commit
	EndLSN     LSN       // Commit: TransactionEndLSN — the only position ever confirmed
	Event      Event     // Kind == KindEvent
}

// Event is one outbox row, ready to become a Kafka record. Its byte slices
// are its own (never aliasing the decoded message) and capacity-limited, so
// appending to one never overwrites another.
type Event struct {
	Table      string    // schema-qualified, e.g. "public.outbox"
	ID         int64     // the outbox id, the idempotency key
	Topic      string    // the Kafka topic
	Key        []byte    // aggregate id in text form; nil when the column is NULL
	Value      []byte    // payload: jsonb/json/text as sent (text form); bytea decoded from its text form (\x hex, or escape) to raw bytes; nil when NULL (a tombstone)
	Headers    []Header  // Headers[0] is {"id", decimal ID}; then each key of the headers JSON object in the order it appears in the text
	CommitTime time.Time // the transaction's commit time (from Begin)
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Decoder decodes the pgoutput messages of one replication stream, in order.
// It remembers the relations described so far and whether a transaction is
// open. It is not safe for concurrent use.
type Decoder struct {
	cols       Columns
	rels       map[uint32]*relation
	inTx       bool
	commitTime time.Time

	hdrs  []Header          // scratch for the headers of the event being built
	names map[string]string // interned topics and header keys
}

// Bounds of the string interning in Decoder.names.
const (
	maxInterned    = 4096
	maxInternedLen = 256
)

// NewDecoder returns a Decoder for outbox tables with the given columns.
// Empty names in cols mean their defaults (see [DefaultColumns]).
func NewDecoder(cols Columns) *Decoder {
	return &Decoder{
		cols:  cols.withDefaults(),
		rels:  make(map[uint32]*relation),
		names: make(map[string]string),
	}
}

// Decode parses one pgoutput message (XLogData.WALData). The returned
// Message does not alias walData.
//
// It returns an error for an empty, truncated or over-long message, an
// unknown message type (streaming, two-phase), a Relation for a table
// without usable outbox columns (see [ValidateTable]), an Insert for a
// relation not described (or not usable), an Insert or Commit outside a
// transaction, and an outbox row that cannot become a record (a [*RowError]).
// A Begin while a transaction is open starts a new one: after a reconnect
// the server resends whole transactions.
func (d *Decoder) Decode(walData []byte) (Message, error) {
	if len(walData) == 0 {
		return Message{}, errors.New("decoding pgoutput message: empty message")
	}
	body := walData[1:]
	switch t := walData[0]; t {
	case 'I':
		return d.decodeInsert(body)
	case 'B':
		return d.decodeBegin(body)
	case 'C':
		return d.decodeCommit(body)
	case 'R':
		return d.decodeRelation(body)
	case 'U', 'D', 'T', 'Y', 'O', 'M':
		if err := checkIgnored(t, body); err != nil {
			return Message{}, fmt.Errorf("decoding %s: %w", ignoredName(t), err)
		}
		return Message{Kind: KindIgnored}, nil
	default:
		return Message{}, fmt.Errorf("decoding pgoutput message: unsupported message type %q (0x%02x)", t, t)
	}
}

// Sizes of the fixed-length messages of protocol version 1, after the type byte.
const (
	beginLen  = 8 + 8 + 4     // final LSN, commit time, xid
	commitLen = 1 + 8 + 8 + 8 // flags, commit LSN, end LSN, commit time
)

func (d *Decoder) decodeBegin(body []byte) (Message, error) {
	if len(body) != beginLen {
		return Message{}, fmt.Errorf("decoding begin: message body is %d bytes, want %d", len(body), beginLen)
	}
	var m pglogrepl.BeginMessage
	if err := m.Decode(body); err != nil {
		return Message{}, fmt.Errorf("decoding begin: %w", err)
	}
	// A Begin while a transaction is open means the stream was restarted
	// mid-transaction (the server resends whole transactions): start over.
	d.inTx = true
	d.commitTime = m.CommitTime
	return Message{Kind: KindBegin, Xid: m.Xid, FinalLSN: m.FinalLSN, CommitTime: m.CommitTime}, nil
}

func (d *Decoder) decodeCommit(body []byte) (Message, error) {
	if len(body) != commitLen {
		return Message{}, fmt.Errorf("decoding commit: message body is %d bytes, want %d", len(body), commitLen)
	}
	var m pglogrepl.CommitMessage
	if err := m.Decode(body); err != nil {
		return Message{}, fmt.Errorf("decoding commit: %w", err)
	}
	if !d.inTx {
		return Message{}, fmt.Errorf("decoding commit at %s: commit outside a transaction", m.CommitLSN)
	}
	d.inTx = false
	d.commitTime = time.Time{}
	return Message{Kind: KindCommit, CommitLSN: m.CommitLSN, EndLSN: m.TransactionEndLSN, CommitTime: m.CommitTime}, nil
}

// intern returns b as a string, reusing an earlier string with the same
// bytes: topics and header keys repeat from row to row.
func (d *Decoder) intern(b []byte) string {
	if s, ok := d.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(d.names) < maxInterned && len(s) <= maxInternedLen {
		d.names[s] = s
	}
	return s
}
