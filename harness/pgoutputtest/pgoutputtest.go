// Package pgoutputtest encodes pgoutput messages (protocol version 1) by
// hand, as PostgreSQL's documentation "Logical Replication Message
// Formats" describes them, for the tests of decode and layout.
package pgoutputtest

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/outbox"
)

// Epoch is the PostgreSQL epoch: timestamps are microseconds since then.
func Epoch() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }

// Msg is a message being encoded; each method appends one field.
type Msg []byte

func (m Msg) U8(v byte) Msg         { return append(m, v) }
func (m Msg) U16(v uint16) Msg      { return binary.BigEndian.AppendUint16(m, v) }
func (m Msg) U32(v uint32) Msg      { return binary.BigEndian.AppendUint32(m, v) }
func (m Msg) U64(v uint64) Msg      { return binary.BigEndian.AppendUint64(m, v) }
func (m Msg) Str(s string) Msg      { return append(append(m, s...), 0) }
func (m Msg) TS(t time.Time) Msg    { return m.U64(uint64(t.Sub(Epoch()).Microseconds())) }
func (m Msg) LSN(l outbox.LSN) Msg  { return m.U64(uint64(l)) }
func (m Msg) Tuple(vs ...Value) Msg { m = m.U16(uint16(len(vs))); return m.Values(vs...) }

// Values appends TupleData values without their count.
func (m Msg) Values(vs ...Value) Msg {
	for _, v := range vs {
		m = m.U8(v.Kind)
		if v.Kind == 't' || v.Kind == 'b' {
			m = m.U32(uint32(len(v.Data)))
			m = append(m, v.Data...)
		}
	}
	return m
}

// Value is one TupleData column.
type Value struct {
	Kind byte
	Data string
}

// Text is a text-format value.
func Text(s string) Value { return Value{'t', s} }

// Bin is a binary-format value.
func Bin(s string) Value { return Value{'b', s} }

// Null is a NULL value.
func Null() Value { return Value{Kind: 'n'} }

// Unchanged is an unchanged TOAST value (not sent).
func Unchanged() Value { return Value{Kind: 'u'} }

// Begin encodes a Begin message.
func Begin(final outbox.LSN, commit time.Time, xid uint32) []byte {
	return Msg{'B'}.LSN(final).TS(commit).U32(xid)
}

// Commit encodes a Commit message.
func Commit(commitLSN, endLSN outbox.LSN, commit time.Time) []byte {
	return Msg{'C'}.U8(0).LSN(commitLSN).LSN(endLSN).TS(commit)
}

// Relation encodes a Relation message; the first column is the key.
func Relation(id uint32, ns, name string, cols ...outbox.Column) []byte {
	m := Msg{'R'}.U32(id).Str(ns).Str(name).U8('d').U16(uint16(len(cols)))
	for i, c := range cols {
		flags := byte(0)
		if i == 0 {
			flags = 1 // part of the key
		}
		m = m.U8(flags).Str(c.Name).U32(c.TypeOID).U32(uint32(c.TypeMod))
	}
	return m
}

// Insert encodes an Insert message.
func Insert(id uint32, vs ...Value) []byte {
	return Msg{'I'}.U32(id).U8('N').Tuple(vs...)
}

// Update encodes an Update message; old 0 sends no old tuple.
func Update(id uint32, old byte, oldVals []Value, newVals []Value) []byte {
	m := Msg{'U'}.U32(id)
	if old != 0 {
		m = m.U8(old).Tuple(oldVals...)
	}
	return m.U8('N').Tuple(newVals...)
}

// Delete encodes a Delete message.
func Delete(id uint32, old byte, vs ...Value) []byte {
	return Msg{'D'}.U32(id).U8(old).Tuple(vs...)
}

// Truncate encodes a Truncate message.
func Truncate(ids ...uint32) []byte {
	m := Msg{'T'}.U32(uint32(len(ids))).U8(0)
	for _, id := range ids {
		m = m.U32(id)
	}
	return m
}

// Type encodes a Type message.
func Type(oid uint32, ns, name string) []byte { return Msg{'Y'}.U32(oid).Str(ns).Str(name) }

// Origin encodes an Origin message.
func Origin(l outbox.LSN, name string) []byte { return Msg{'O'}.LSN(l).Str(name) }

// LogicalMessage encodes a logical decoding message.
func LogicalMessage(transactional bool, l outbox.LSN, prefix, content string) []byte {
	flags := byte(0)
	if transactional {
		flags = 1
	}
	return append(Msg{'M'}.U8(flags).LSN(l).Str(prefix).U32(uint32(len(content))), content...)
}

// The default outbox table as a Relation message describes it.
const OutboxRelID = 16384

// OutboxColumns are the default outbox table's columns as a Relation message describes them.
func OutboxColumns() []outbox.Column {
	return []outbox.Column{
		{Name: "id", TypeOID: pgtype.Int8OID, TypeMod: -1}, {Name: "aggregate_id", TypeOID: pgtype.UUIDOID, TypeMod: -1},
		{Name: "topic", TypeOID: pgtype.TextOID, TypeMod: -1}, {Name: "payload", TypeOID: pgtype.JSONBOID, TypeMod: -1},
		{Name: "headers", TypeOID: pgtype.JSONBOID, TypeMod: -1}, {Name: "created_at", TypeOID: pgtype.TimestamptzOID, TypeMod: 3},
	}
}

// OutboxRelation describes the default outbox table as relation OutboxRelID.
func OutboxRelation() []byte { return Relation(OutboxRelID, "public", "outbox", OutboxColumns()...) }

// OutboxInsert encodes an insert into the default outbox table.
func OutboxInsert(id, key, topic, payload, headers Value) []byte {
	return Insert(OutboxRelID, id, key, topic, payload, headers, Text("2026-01-02 03:04:05.123456+00"))
}

// CommitTime is the commit time of TestBegin and TestCommit.
func CommitTime() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC) }

// TestBegin begins a transaction committing at 0/1000.
func TestBegin() []byte { return Begin(0x1000, CommitTime(), 777) }

// TestCommit ends TestBegin's transaction at 0/1030.
func TestCommit() []byte { return Commit(0x1000, 0x1030, CommitTime()) }
