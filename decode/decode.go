package decode

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/outbox"
)

// Kind says what a decoded [Message] is.
type Kind uint8

// The kinds of decoded messages.
const (
	KindIgnored Kind = iota // Relation, Type, Origin, Update, Delete, Truncate, other messages...: nothing to publish
	KindBegin               // a transaction starts
	KindEvent               // an insert into an outbox table or an event message: publish Message.Event
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
	Xid        uint32     // Begin
	FinalLSN   outbox.LSN // Begin: LSN of the commit record (pglogrepl BeginMessage.FinalLSN)
	CommitTime time.Time  // Begin and Commit: the transaction's commit time
	CommitLSN  outbox.LSN // Commit
	EndLSN     outbox.LSN // Commit: TransactionEndLSN — the only position ever confirmed
	// SentTime is when the walsender sent the message (its XLogData
	// header's server clock). Decode leaves it zero; the reader sets it.
	SentTime time.Time
	// Event is set for KindEvent. Its byte slices are its own (never
	// aliasing the decoded message) and capacity-limited, so appending to
	// one never overwrites another. Value is the payload: jsonb/json/text as
	// sent (text form); bytea decoded from its text form (\x hex, or
	// escape) to raw bytes; nil when NULL (a tombstone). Its CommitLSN is
	// the Begin's FinalLSN and Index counts the transaction's events.
	Event outbox.Event
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
// open. It is not safe for concurrent use. It is the one type of the
// parser, about 300 lines of methods: one file per message family (insert,
// relation, headers, ignored messages), sharing the stream's state.
type Decoder struct {
	cols       Columns
	rels       map[uint32]*relation
	inTx       bool
	xid        uint32
	commitTime time.Time
	commitLSN  outbox.LSN
	index      int // events of the open transaction so far
	// msgSource is the SourceHeader's value for table-less events; "" without Columns.Source.
	msgSource string

	hdrs    []outbox.Header   // scratch for the headers of the event being built
	row     []value           // scratch: the values of the insert being decoded
	scratch []byte            // scratch: the topic being built
	names   map[string]string // interned topics and header keys
	types   *pgtype.Map       // pgx's codecs, for a timestamp column; made when first needed
}

// Bounds of the string interning in Decoder.names.
const (
	maxInterned    = 4096
	maxInternedLen = 256
)

// NewDecoder returns a Decoder for outbox tables with the given columns.
// Empty names in cols mean their defaults (see [DefaultColumns]).
func NewDecoder(cols Columns) *Decoder {
	d := &Decoder{
		cols:  cols.WithDefaults(),
		rels:  make(map[uint32]*relation),
		names: make(map[string]string),
	}
	if d.cols.MessagePrefix != "" {
		d.msgSource = d.source(messageTable(d.cols.MessagePrefix))
	}
	return d
}

// SourceName is a name as it stands in a source (Columns.Source and the
// SourceHeader): as it is when it is a plain lower-case SQL identifier,
// else double-quoted as SQL quotes it ("a.b", "Orders", "x/y"), so that
// the parts of a source never run together: schema a.b with table c and
// schema a with table b.c are two sources.
func SourceName(name string) string {
	plain := name != ""
	for i, c := range name {
		if !(c == '_' || c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '$')) {
			plain = false
			break
		}
	}
	if plain {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// source is the SourceHeader's value for the events of table (see
// Columns.Source): "" without a Source.
func (d *Decoder) source(table string) string {
	if d.cols.Source == "" {
		return ""
	}
	return d.cols.Source + "/" + table
}

// appendSource appends the source header's value to buf and d.hdrs (which
// holds the id header): nothing when source is "".
func (d *Decoder) appendSource(buf []byte, source string) []byte {
	if source == "" {
		return buf
	}
	start := len(buf)
	buf = append(buf, source...)
	d.hdrs = append(d.hdrs, outbox.Header{Key: SourceHeader, Value: buf[start:len(buf):len(buf)]})
	return buf
}

// Decode parses one pgoutput message (XLogData.WALData). The returned
// Message does not alias walData.
//
// It returns an error for an empty, truncated or over-long message, an
// unknown message type (streaming, two-phase), an Insert for a relation not
// described, a Begin inside a transaction or an Insert or Commit outside
// one (decode is the one place that checks the transaction frame: each
// replication session gets a new Decoder), and an outbox row that cannot
// become a record (a [*RowError], which carries what could be read of the
// row). A Relation for a table without usable outbox columns (see
// [ValidateTable]) is remembered as unusable: each insert into it is a
// *RowError naming the problems.
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
