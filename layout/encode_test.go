package layout

import (
	"encoding/binary"
	"github.com/outboxd/outboxd/outbox"
	"time"
)

// This file encodes pgoutput messages (protocol version 1) by hand, as the
// PostgreSQL documentation "Logical Replication Message Formats" describes
// them, for the tests.

// pgEpoch is the PostgreSQL epoch: timestamps are microseconds since then.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

type msg []byte

func (m msg) u8(v byte) msg        { return append(m, v) }
func (m msg) u16(v uint16) msg     { return binary.BigEndian.AppendUint16(m, v) }
func (m msg) u32(v uint32) msg     { return binary.BigEndian.AppendUint32(m, v) }
func (m msg) u64(v uint64) msg     { return binary.BigEndian.AppendUint64(m, v) }
func (m msg) str(s string) msg     { return append(append(m, s...), 0) }
func (m msg) ts(t time.Time) msg   { return m.u64(uint64(t.Sub(pgEpoch).Microseconds())) }
func (m msg) lsn(l outbox.LSN) msg { return m.u64(uint64(l)) }
func (m msg) tuple(vs ...tv) msg   { m = m.u16(uint16(len(vs))); return m.values(vs...) }
func (m msg) values(vs ...tv) msg {
	for _, v := range vs {
		m = m.u8(v.kind)
		if v.kind == 't' || v.kind == 'b' {
			m = m.u32(uint32(len(v.data)))
			m = append(m, v.data...)
		}
	}
	return m
}

// tv is one TupleData column.
type tv struct {
	kind byte
	data string
}

func text(s string) tv { return tv{'t', s} }
func bin(s string) tv  { return tv{'b', s} }

var (
	null      = tv{kind: 'n'}
	unchanged = tv{kind: 'u'}
)

func encBegin(final outbox.LSN, commit time.Time, xid uint32) []byte {
	return msg{'B'}.lsn(final).ts(commit).u32(xid)
}

func encCommit(commitLSN, endLSN outbox.LSN, commit time.Time) []byte {
	return msg{'C'}.u8(0).lsn(commitLSN).lsn(endLSN).ts(commit)
}

func encRelation(id uint32, ns, name string, cols ...Column) []byte {
	m := msg{'R'}.u32(id).str(ns).str(name).u8('d').u16(uint16(len(cols)))
	for i, c := range cols {
		flags := byte(0)
		if i == 0 {
			flags = 1 // part of the key
		}
		m = m.u8(flags).str(c.Name).u32(c.TypeOID).u32(uint32(c.TypeMod))
	}
	return m
}

func encInsert(id uint32, vs ...tv) []byte {
	return msg{'I'}.u32(id).u8('N').tuple(vs...)
}

func encUpdate(id uint32, old byte, oldVals []tv, newVals []tv) []byte {
	m := msg{'U'}.u32(id)
	if old != 0 {
		m = m.u8(old).tuple(oldVals...)
	}
	return m.u8('N').tuple(newVals...)
}

func encDelete(id uint32, old byte, vs ...tv) []byte {
	return msg{'D'}.u32(id).u8(old).tuple(vs...)
}

func encTruncate(ids ...uint32) []byte {
	m := msg{'T'}.u32(uint32(len(ids))).u8(0)
	for _, id := range ids {
		m = m.u32(id)
	}
	return m
}

func encType(oid uint32, ns, name string) []byte { return msg{'Y'}.u32(oid).str(ns).str(name) }

func encOrigin(l outbox.LSN, name string) []byte { return msg{'O'}.lsn(l).str(name) }

func encLogicalMessage(transactional bool, l outbox.LSN, prefix, content string) []byte {
	flags := byte(0)
	if transactional {
		flags = 1
	}
	return append(msg{'M'}.u8(flags).lsn(l).str(prefix).u32(uint32(len(content))), content...)
}

// The default outbox table as a Relation message describes it.
const outboxRelID = 16384

func outboxColumns() []Column {
	return []Column{
		{Name: "id", TypeOID: oidInt8}, {Name: "aggregate_id", TypeOID: oidUUID}, {Name: "topic", TypeOID: oidText},
		{Name: "payload", TypeOID: oidJSONB}, {Name: "headers", TypeOID: oidJSONB}, {Name: "created_at", TypeOID: 1184},
	}
}

func outboxRelation() []byte { return encRelation(outboxRelID, "public", "outbox", outboxColumns()...) }

// outboxInsert encodes an insert into the default outbox table.
func outboxInsert(id, key, topic, payload, headers tv) []byte {
	return encInsert(outboxRelID, id, key, topic, payload, headers, text("2026-01-02 03:04:05.123456+00"))
}

var testCommitTime = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)

func testBegin() []byte  { return encBegin(0x1000, testCommitTime, 777) }
func testCommit() []byte { return encCommit(0x1000, 0x1030, testCommitTime) }
