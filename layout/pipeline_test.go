package layout

import (
	"fmt"
	"time"

	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/outbox"
)

// The tests of this package feed pgoutput bytes through the two steps
// outboxd's reader takes, decode then layout, and look at what comes
// out: the record contract is what a row becomes, end to end. Decoder
// and Message here are that pipeline as the tests see it.

// Kind says what a Message is.
type Kind uint8

const (
	KindIgnored Kind = iota
	KindBegin
	KindEvent
	KindCommit
)

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

// Message is one pgoutput message, decoded and laid out.
type Message struct {
	Kind       Kind
	Xid        uint32
	FinalLSN   outbox.LSN
	CommitTime time.Time
	CommitLSN  outbox.LSN
	EndLSN     outbox.LSN
	Event      outbox.Event
}

// Decoder decodes and lays out the messages of one stream, in order.
type Decoder struct {
	d *decode.Decoder
	l *Layout
}

// NewDecoder returns the pipeline for tables with the given columns.
func NewDecoder(cols Columns) *Decoder {
	return &Decoder{d: decode.NewDecoder(cols.MessagePrefix), l: New(cols)}
}

// Decode decodes one pgoutput message and lays out a row or emitted
// message: its errors are decode's, or a *outbox.RowError of the layout.
func (p *Decoder) Decode(walData []byte) (Message, error) {
	m, err := p.d.Decode(walData)
	if err != nil {
		return Message{}, err
	}
	return p.layOut(m)
}

func (p *Decoder) layOut(m decode.Message) (Message, error) {
	switch m.Kind {
	case decode.KindBegin:
		return Message{Kind: KindBegin, Xid: m.Xid, FinalLSN: m.FinalLSN, CommitTime: m.CommitTime}, nil
	case decode.KindCommit:
		return Message{Kind: KindCommit, CommitLSN: m.CommitLSN, EndLSN: m.EndLSN, CommitTime: m.CommitTime}, nil
	case decode.KindRow:
		ev, err := p.l.Row(&m.Row)
		if err != nil {
			return Message{}, err
		}
		return Message{Kind: KindEvent, Event: ev}, nil
	case decode.KindEmitted:
		ev, err := p.l.Emitted(&m.Emitted)
		if err != nil {
			return Message{}, err
		}
		return Message{Kind: KindEvent, Event: ev}, nil
	}
	return Message{Kind: KindIgnored}, nil
}

// RowError is the error a row that cannot become a record is.
type RowError = outbox.RowError

// Column is a column of a table.
type Column = outbox.Column

// Snapshot is decode's Snapshot laid out: what a backfill hands over.
type Snapshot struct {
	s *decode.Snapshot
	p *Decoder
}

// NewSnapshot returns decode's Snapshot whose rows are laid out with cols.
func NewSnapshot(cols Columns, consistentPoint outbox.LSN, commitTime time.Time) (*Snapshot, Message, error) {
	s, begin, err := decode.NewSnapshot(consistentPoint, commitTime)
	if err != nil {
		return nil, Message{}, err
	}
	snap := &Snapshot{s: s, p: &Decoder{l: New(cols)}}
	m, err := snap.p.layOut(begin)
	return snap, m, err
}

func (s *Snapshot) Table(schema, name string, cols []outbox.Column) (uint32, error) {
	return s.s.Table(schema, name, cols)
}

func (s *Snapshot) Row(rel uint32, values [][]byte) (Message, error) {
	m, err := s.s.Row(rel, values)
	if err != nil {
		return Message{}, err
	}
	return s.p.layOut(m)
}

func (s *Snapshot) Commit() (Message, error) {
	m, err := s.s.Commit()
	if err != nil {
		return Message{}, err
	}
	return s.p.layOut(m)
}
