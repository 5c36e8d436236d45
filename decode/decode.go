package decode

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/outbox"
)

// Kind says what a decoded [Message] is.
type Kind uint8

// The kinds of decoded messages.
const (
	KindIgnored Kind = iota // Relation, Type, Origin, Update, Delete, Truncate, messages under other prefixes: nothing to publish
	KindBegin               // a transaction starts
	KindRow                 // an insert into a table of the publication: Message.Row
	KindEmitted             // a logical decoding message under the events' prefix: Message.Emitted
	KindCommit              // the transaction ends; Message.EndLSN may be confirmed once all its events are
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindIgnored:
		return "ignored"
	case KindBegin:
		return "begin"
	case KindRow:
		return "row"
	case KindEmitted:
		return "emitted"
	case KindCommit:
		return "commit"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Message is one decoded pgoutput message. Which fields are set depends on Kind.
type Message struct {
	Kind       Kind
	Xid        uint32     // Begin
	FinalLSN   outbox.LSN // Begin: LSN of the commit record (pglogrepl BeginMessage.FinalLSN)
	CommitTime time.Time  // Begin and Commit: the transaction's commit time
	CommitLSN  outbox.LSN // Commit
	EndLSN     outbox.LSN // Commit: TransactionEndLSN, the only position ever confirmed
	// Row is set for KindRow: the inserted row, its values aliasing the
	// decoded message (valid until the next Decode), its place the
	// Begin's FinalLSN and commit time and its index among the
	// transaction's rows and emitted messages.
	Row outbox.Row
	// Emitted is set for KindEmitted, its Content aliasing the decoded
	// message.
	Emitted outbox.Emitted
}

// Begin returns the transaction boundary of a KindBegin message.
func (m *Message) Begin() outbox.Begin {
	return outbox.Begin{Xid: m.Xid, CommitLSN: m.FinalLSN, CommitTime: m.CommitTime}
}

// Commit returns the transaction boundary of a KindCommit message.
func (m *Message) Commit() outbox.Commit {
	return outbox.Commit{CommitLSN: m.CommitLSN, EndLSN: m.EndLSN, CommitTime: m.CommitTime}
}

// Decoder decodes the pgoutput messages of one replication stream, in order.
// It remembers the relations described so far and whether a transaction is
// open. It is not safe for concurrent use.
type Decoder struct {
	prefix     string // Emitted messages' prefix; "" for none
	rels       map[uint32]*outbox.Relation
	inTx       bool
	xid        uint32
	commitTime time.Time
	commitLSN  outbox.LSN
	index      int            // rows and emitted messages of the open transaction so far
	row        []outbox.Value // scratch: the values of the insert being decoded
}

// NewDecoder returns a Decoder. Logical decoding messages with exactly the
// prefix messagePrefix are handed over as KindEmitted (table-less events);
// others, and all of them when messagePrefix is "", are ignored.
func NewDecoder(messagePrefix string) *Decoder {
	return &Decoder{prefix: messagePrefix, rels: make(map[uint32]*outbox.Relation)}
}

// Decode parses one pgoutput message (XLogData.WALData). A KindRow or
// KindEmitted Message aliases walData; the others do not.
//
// It returns an error for an empty, truncated or over-long message, an
// unknown message type (streaming, two-phase), an Insert for a relation not
// described, a Begin inside a transaction or an Insert, a transactional
// message or a Commit outside one (decode is the one place that checks the
// transaction frame: each replication session gets a new Decoder).
func (d *Decoder) Decode(walData []byte) (Message, error) {
	if len(walData) == 0 {
		return Message{}, errors.New("decoding pgoutput message: empty message")
	}
	if len(d.row) > 0 {
		// The last row's values are no longer the caller's: do not keep
		// its message alive while the stream is idle.
		clear(d.row)
		d.row = d.row[:0]
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
	case 'M':
		return d.decodeMessage(body)
	case 'U', 'D', 'T', 'Y', 'O':
		if err := checkIgnored(t, body); err != nil {
			return Message{}, fmt.Errorf("decoding %s: %w", ignoredName(t), err)
		}
		return Message{Kind: KindIgnored}, nil
	default:
		return Message{}, fmt.Errorf("decoding pgoutput message: unsupported message type %q (0x%02x)", t, t)
	}
}

// place is where the next row or emitted message of the open transaction
// stands; it counts it.
func (d *Decoder) place() outbox.Place {
	p := outbox.Place{CommitLSN: d.commitLSN, CommitTime: d.commitTime, Index: d.index}
	d.index++
	return p
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
	if d.inTx {
		return Message{}, fmt.Errorf("decoding begin of transaction %d: transaction %d is still open", m.Xid, d.xid)
	}
	d.inTx, d.xid, d.index = true, m.Xid, 0
	d.commitTime, d.commitLSN = m.CommitTime, outbox.LSN(m.FinalLSN)
	return Message{Kind: KindBegin, Xid: m.Xid, FinalLSN: outbox.LSN(m.FinalLSN), CommitTime: m.CommitTime}, nil
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
	d.commitTime, d.commitLSN = time.Time{}, 0
	return Message{Kind: KindCommit, CommitLSN: outbox.LSN(m.CommitLSN), EndLSN: outbox.LSN(m.TransactionEndLSN), CommitTime: m.CommitTime}, nil
}
