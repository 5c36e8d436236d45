package cdc

import (
	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/outbox"
)

// change is the change of the stream that a decoded message is, for the
// consumer: a transaction's Begin or Commit as they are, a row or an
// emitted message laid out as its record. Its Kind is 0 for a message
// with nothing to hand over. A *outbox.RowError is a row or message that
// cannot become a record, in its place.
func change(l *layout.Layout, m *decode.Message) (outbox.Change, error) {
	switch m.Kind {
	case decode.KindBegin:
		return outbox.Change{Kind: outbox.ChangeBegin, Begin: m.Begin()}, nil
	case decode.KindCommit:
		return outbox.Change{Kind: outbox.ChangeCommit, Commit: m.Commit()}, nil
	case decode.KindRow:
		ev, err := l.Row(&m.Row)
		return outbox.Change{Kind: outbox.ChangeEvent, Event: ev}, err
	case decode.KindEmitted:
		ev, err := l.Emitted(&m.Emitted)
		return outbox.Change{Kind: outbox.ChangeEvent, Event: ev}, err
	}
	return outbox.Change{}, nil
}
