package decode

import "fmt"

// Kinds of a TupleData column value.
const (
	valueNull      = 'n' // NULL
	valueUnchanged = 'u' // unchanged TOASTed value, not sent
	valueText      = 't' // text format
	valueBinary    = 'b' // binary format
)

// value is one column of a TupleData. data aliases the message.
type value struct {
	kind byte // 0 when the column is absent from the table
	data []byte
}

func (v value) present() bool { return v.kind == valueText || v.kind == valueBinary }

// nextValue reads one TupleData column: Byte1 kind, and for 't' and 'b' an
// Int32 length and that many bytes. data aliases the message.
func nextValue(r *reader) (kind byte, data []byte, err error) {
	kind, err = r.uint8("value kind")
	if err != nil {
		return 0, nil, err
	}
	switch kind {
	case valueNull, valueUnchanged:
		return kind, nil, nil
	case valueText, valueBinary:
		n, err := r.length("value length", "value")
		if err != nil {
			return 0, nil, err
		}
		data, err = r.bytes("value", n)
		return kind, data, err
	}
	return 0, nil, fmt.Errorf("value kind %q at offset %d, want 'n', 'u', 't' or 'b'", kind, r.pos-1)
}
