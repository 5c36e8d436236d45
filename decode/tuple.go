package decode

import (
	"fmt"

	"github.com/outboxd/outboxd/outbox"
)

// valueUnchanged marks an unchanged TOASTed value, not sent: the one
// TupleData kind besides outbox.ValueNull, ValueText and ValueBinary.
const valueUnchanged = 'u'

// nextValue reads one TupleData column: Byte1 kind, and for 't' and 'b' an
// Int32 length and that many bytes. data aliases the message.
func nextValue(r *reader) (kind byte, data []byte, err error) {
	kind, err = r.uint8("value kind")
	if err != nil {
		return 0, nil, err
	}
	switch kind {
	case outbox.ValueNull, valueUnchanged:
		return kind, nil, nil
	case outbox.ValueText, outbox.ValueBinary:
		n, err := r.length("value length", "value")
		if err != nil {
			return 0, nil, err
		}
		data, err = r.bytes("value", n)
		return kind, data, err
	}
	return 0, nil, fmt.Errorf("value kind %q at offset %d, want 'n', 'u', 't' or 'b'", kind, r.pos-1)
}
