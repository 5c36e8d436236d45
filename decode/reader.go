package decode

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// reader walks a pgoutput message with bounds checks on every read. Each
// method names the field it reads so that a truncation error says where the
// message ended.
type reader struct {
	buf []byte
	pos int
}

func (r *reader) left() int { return len(r.buf) - r.pos }

func (r *reader) need(field string, n int) error {
	if n < 0 || r.left() < n {
		return truncatedError(field, r.pos, uint64(max(n, 0)), r.left())
	}
	return nil
}

func (r *reader) uint8(field string) (byte, error) {
	if err := r.need(field, 1); err != nil {
		return 0, err
	}
	v := r.buf[r.pos]
	r.pos++
	return v, nil
}

func (r *reader) uint16(field string) (uint16, error) {
	if err := r.need(field, 2); err != nil {
		return 0, err
	}
	v := binary.BigEndian.Uint16(r.buf[r.pos:])
	r.pos += 2
	return v, nil
}

func (r *reader) uint32(field string) (uint32, error) {
	if err := r.need(field, 4); err != nil {
		return 0, err
	}
	v := binary.BigEndian.Uint32(r.buf[r.pos:])
	r.pos += 4
	return v, nil
}

func (r *reader) uint64(field string) (uint64, error) {
	if err := r.need(field, 8); err != nil {
		return 0, err
	}
	v := binary.BigEndian.Uint64(r.buf[r.pos:])
	r.pos += 8
	return v, nil
}

func (r *reader) skip(field string, n int) error {
	if err := r.need(field, n); err != nil {
		return err
	}
	r.pos += n
	return nil
}

// bytes returns the next n bytes (aliasing the buffer).
func (r *reader) bytes(field string, n int) ([]byte, error) {
	if err := r.need(field, n); err != nil {
		return nil, err
	}
	v := r.buf[r.pos : r.pos+n : r.pos+n]
	r.pos += n
	return v, nil
}

// cstring returns a NUL-terminated string without its NUL (aliasing the buffer).
func (r *reader) cstring(field string) ([]byte, error) {
	end := bytes.IndexByte(r.buf[r.pos:], 0)
	if end < 0 {
		return nil, fmt.Errorf("truncated at offset %d: %s has no terminating NUL", r.pos, field)
	}
	v := r.buf[r.pos : r.pos+end : r.pos+end]
	r.pos += end + 1
	return v, nil
}

// done reports trailing bytes: pgoutput messages have an exact length.
func (r *reader) done() error {
	if r.left() != 0 {
		return fmt.Errorf("%d unexpected trailing bytes at offset %d", r.left(), r.pos)
	}
	return nil
}

// length reads the 32-bit length field named lengthField and checks that
// that many bytes (of field) follow.
func (r *reader) length(lengthField, field string) (int, error) {
	n, err := r.uint32(lengthField)
	if err != nil {
		return 0, err
	}
	if uint64(n) > uint64(r.left()) {
		return 0, truncatedError(field, r.pos, uint64(n), r.left())
	}
	return int(n), nil
}
