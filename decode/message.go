package decode

import (
	"fmt"

	"github.com/outboxd/outboxd/outbox"
)

// decodeMessage parses a logical decoding message: Int8 flags (1:
// transactional), Int64 LSN, String prefix, Int32 length, Byte(n) content.
// One under another prefix is checked and ignored; one under the events'
// prefix is handed over whole (package layout reads its envelope).
func (d *Decoder) decodeMessage(body []byte) (Message, error) {
	r := reader{buf: body}
	flags, err := r.uint8("flags")
	if err != nil {
		return Message{}, fmt.Errorf("decoding logical decoding message: %w", err)
	}
	u, err := r.uint64("LSN")
	if err != nil {
		return Message{}, fmt.Errorf("decoding logical decoding message: %w", err)
	}
	lsn := outbox.LSN(u)
	prefix, err := r.cstring("prefix")
	if err != nil {
		return Message{}, fmt.Errorf("decoding logical decoding message: %w", err)
	}
	n, err := r.length("content length", "content")
	if err != nil {
		return Message{}, fmt.Errorf("decoding logical decoding message: %w", err)
	}
	content, err := r.bytes("content", n)
	if err == nil {
		err = r.done()
	}
	if err != nil {
		return Message{}, fmt.Errorf("decoding logical decoding message: %w", err)
	}
	if d.prefix == "" || string(prefix) != d.prefix {
		return Message{Kind: KindIgnored}, nil
	}
	e := outbox.Emitted{LSN: lsn, Prefix: d.prefix, Content: content, Transactional: flags&1 != 0, InTxn: d.inTx}
	if e.Transactional && !d.inTx {
		return Message{}, fmt.Errorf("decoding logical decoding message at %s: transactional message outside a transaction", lsn)
	}
	// A non-transactional message inside a transaction is counted there
	// too: a layout refuses it in that place.
	if d.inTx {
		e.Place = d.place()
	}
	return Message{Kind: KindEmitted, Emitted: e}, nil
}
