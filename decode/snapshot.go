package decode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// Snapshot turns rows read from an outbox table with SELECT into the
// Messages the replication stream gives for inserts of the same rows: one
// Begin, a KindRow per row, one Commit. It frames each row
// as the pgoutput message (protocol version 1) the walsender would have
// sent, with every column in text form as pgoutput sends it, and decodes
// it with a Decoder of its own. So a backfilled row and a streamed row
// follow one record contract, byte for byte, by construction.
//
// The rows form one transaction at commitTime that ends at the slot's
// consistent point, the position of the slot the backfill precedes: its
// Commit's end LSN, which may be confirmed once every row is acknowledged.
// Its events take positions (consistent point - 1, i): strictly before
// every position the stream gives, whose commits start at the consistent
// point or later. A streamed event is never at a backfilled one's
// position, so the exactly-once sink never skips it as one it holds.
type Snapshot struct {
	d          *Decoder
	tables     uint32 // relation ids handed out so far
	commitLSN  outbox.LSN
	endLSN     outbox.LSN
	commitTime time.Time
	buf        []byte
}

// NewSnapshot returns a Snapshot whose transaction ends at the slot's consistent point (not zero), and
// the Begin message of its transaction. Describe each table with Table
// before its rows.
func NewSnapshot(consistentPoint outbox.LSN, commitTime time.Time) (*Snapshot, Message, error) {
	if consistentPoint == 0 {
		return nil, Message{}, errors.New("backfill snapshot: the consistent point is 0/0")
	}
	s := &Snapshot{d: NewDecoder(""), commitLSN: consistentPoint - 1, endLSN: consistentPoint, commitTime: commitTime}
	// Begin: final LSN, commit time, xid (none: the snapshot is no transaction).
	b := append(s.buf[:0], 'B')
	b = binary.BigEndian.AppendUint64(b, uint64(s.commitLSN))
	b = binary.BigEndian.AppendUint64(b, uint64(pgMicros(commitTime)))
	b = binary.BigEndian.AppendUint32(b, 0)
	s.buf = b
	begin, err := s.d.Decode(b)
	return s, begin, err
}

// Table describes table schema.name, whose rows have the columns cols (in
// the order the SELECT returns them), as a Relation message would, and
// returns the id its rows are passed with.
func (s *Snapshot) Table(schema, name string, cols []outbox.Column) (uint32, error) {
	s.tables++
	b := append(s.buf[:0], 'R')
	b = binary.BigEndian.AppendUint32(b, s.tables)
	b = append(append(b, schema...), 0)
	b = append(append(b, name...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, 0)
		b = append(append(b, c.Name...), 0)
		b = binary.BigEndian.AppendUint32(b, c.TypeOID)
		b = binary.BigEndian.AppendUint32(b, uint32(c.TypeMod))
	}
	s.buf = b
	if _, err := s.d.Decode(b); err != nil {
		return 0, fmt.Errorf("describing %s.%s: %w", schema, name, err)
	}
	return s.tables, nil
}

// Row decodes one row of the table rel: values holds each column's text
// form, nil for NULL. Its errors are those of Decoder.Decode for an
// insert. Rows are indexed in their order, across tables; the KindRow
// Message aliases the Snapshot's buffer until the next call.
func (s *Snapshot) Row(rel uint32, values [][]byte) (Message, error) {
	b := append(s.buf[:0], 'I')
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(values)))
	for _, v := range values {
		if v == nil {
			b = append(b, 'n')
			continue
		}
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	s.buf = b
	return s.d.Decode(b)
}

// Commit returns the Commit message that ends the rows' transaction.
func (s *Snapshot) Commit() (Message, error) {
	b := append(s.buf[:0], 'C', 0)
	b = binary.BigEndian.AppendUint64(b, uint64(s.commitLSN))
	b = binary.BigEndian.AppendUint64(b, uint64(s.endLSN))
	b = binary.BigEndian.AppendUint64(b, uint64(pgMicros(s.commitTime)))
	s.buf = b
	return s.d.Decode(b)
}

// pgMicros is t in microseconds since the PostgreSQL epoch, 2000-01-01 UTC.
func pgMicros(t time.Time) int64 {
	return t.Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds()
}
