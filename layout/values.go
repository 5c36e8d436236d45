package layout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/outboxd/outboxd/outbox"
)

// The column values' bytes as a record carries them: the id, the key,
// the payload, a value's text form. Pure functions of a value and its
// column's type, shared by every shape.

// appendID appends the outbox id in text form: an integer in decimal, a
// uuid in its canonical form, text as it is (never empty). Text format is
// checked (an integer column sends digits, but a corrupt stream must not
// put anything else in the id header); binary format is a big-endian
// integer of the column's width, or a uuid's 16 bytes.
func appendID(buf []byte, v outbox.Value, oid uint32) ([]byte, error) {
	switch v.Format {
	case outbox.ValueText:
		switch oid {
		case oidInt8, oidInt4, oidInt2:
			if _, err := strconv.ParseInt(string(v.Data), 10, 64); err != nil {
				return buf, fmt.Errorf("id %s is not an integer", quoteShort(v.Data))
			}
		case oidUUID:
			if len(v.Data) != 36 {
				return buf, fmt.Errorf("id %s is not a uuid", quoteShort(v.Data))
			}
		}
		if len(v.Data) == 0 {
			return buf, errors.New("empty id")
		}
		return append(buf, v.Data...), nil
	case outbox.ValueBinary:
		want := 8
		switch oid {
		case oidInt4:
			want = 4
		case oidInt2:
			want = 2
		case oidUUID:
			want = 16
		case oidText, oidVarchar:
			if len(v.Data) == 0 {
				return buf, errors.New("empty id")
			}
			return append(buf, v.Data...), nil
		}
		switch {
		case len(v.Data) != want:
		case want == 16:
			return appendUUID(buf, v.Data), nil
		case want == 8:
			return strconv.AppendInt(buf, int64(binary.BigEndian.Uint64(v.Data)), 10), nil
		case want == 4:
			return strconv.AppendInt(buf, int64(int32(binary.BigEndian.Uint32(v.Data))), 10), nil
		case want == 2:
			return strconv.AppendInt(buf, int64(int16(binary.BigEndian.Uint16(v.Data))), 10), nil
		}
		return buf, fmt.Errorf("binary %s id is %d bytes, want %d", describeType(oid), len(v.Data), want)
	}
	return buf, errors.New("null id")
}

// appendUUID appends a uuid's 16 bytes in canonical text form.
func appendUUID(buf, b []byte) []byte {
	const hexDigits = "0123456789abcdef"
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			buf = append(buf, '-')
		}
		buf = append(buf, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return buf
}

// appendKey appends the aggregate id in text form.
func appendKey(buf []byte, v outbox.Value, oid uint32) ([]byte, error) {
	if v.Format == outbox.ValueBinary {
		switch oid {
		case oidUUID:
			if len(v.Data) == 16 {
				return appendUUID(buf, v.Data), nil
			}
		case oidInt8, oidInt4, oidInt2: // the key is the decimal text, as in text format
			out, err := appendID(buf, v, oid)
			if err != nil {
				return buf, fmt.Errorf("key: %w", err)
			}
			return out, nil
		}
	}
	return append(buf, v.Data...), nil
}

// appendPayload appends the payload bytes: bytea decoded from its text form
// to raw bytes, jsonb in binary format without its version byte, anything
// else as sent.
func appendPayload(buf []byte, v outbox.Value, oid uint32) ([]byte, error) {
	switch {
	case oid == oidBytea && v.Format == outbox.ValueText:
		return appendBytea(buf, v.Data)
	case oid == oidJSONB && v.Format == outbox.ValueBinary:
		raw, err := jsonText(v, oid)
		if err != nil {
			return buf, err
		}
		return append(buf, raw...), nil
	}
	return append(buf, v.Data...), nil
}

// jsonText returns the JSON text of a json or jsonb value: binary jsonb is
// a version byte (1) followed by the text.
func jsonText(v outbox.Value, oid uint32) ([]byte, error) {
	if oid != oidJSONB || v.Format != outbox.ValueBinary {
		return v.Data, nil
	}
	if len(v.Data) == 0 || v.Data[0] != 1 {
		return nil, errors.New("binary jsonb value without version 1 prefix")
	}
	return v.Data[1:], nil
}

// appendText appends a column value's text form: a text-format value as
// sent; a binary one for the types that have an obvious text form
// (integers, uuid, text, json), an error for any other.
func appendText(buf []byte, v outbox.Value, oid uint32) ([]byte, error) {
	if v.Format == outbox.ValueText {
		return append(buf, v.Data...), nil
	}
	switch oid {
	case oidInt8, oidInt4, oidInt2:
		return appendID(buf, v, oid)
	case oidUUID:
		if len(v.Data) != 16 {
			return buf, fmt.Errorf("binary uuid is %d bytes, want 16", len(v.Data))
		}
		return appendUUID(buf, v.Data), nil
	case oidText, oidVarchar, oidJSON:
		return append(buf, v.Data...), nil
	case oidJSONB:
		raw, err := jsonText(v, oid)
		if err != nil {
			return buf, err
		}
		return append(buf, raw...), nil
	}
	return buf, fmt.Errorf("binary value of %s has no text form here", describeType(oid))
}
