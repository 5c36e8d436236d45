package cdc

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxd/outboxd/lib/rawio"
	"github.com/outboxd/outboxd/outbox"

	"github.com/outboxd/outboxd/harness/netfault"
)

// Regression (issue 37): the reader returned with SO_RCVLOWAT raised (in
// the middle of a transaction, or lingering after one), so the small
// reply to the final status waited out its whole deadline and shutdown
// stalled for up to 10 s. After run the mark is one byte again, and a
// small message is read as soon as it arrives.
//
// The reader is stopped while its consumer holds an event of an open
// transaction: the transaction raised the mark, and nothing lowers it
// while the consumer holds the reader. With raw I/O off (rawio.EnvVar)
// there is no mark to check, and the small message must still be read at
// once.
func TestReaderLowersTheMarkWhenItStops(t *testing.T) {
	t.Parallel()
	client, server := netfault.TCPPair(t)
	client = rawio.Wrap(client) // as the stream dials
	paced := rawio.SocketOf(client) != nil
	reply := make(chan struct{})
	conn := fakeServerOver(t, client, server, func(_ *pgproto3.Backend, c net.Conn) error {
		// One write: the Insert is there as soon as the Begin is read.
		var b []byte
		for _, m := range [][]byte{pgoutputRelation(), pgoutputBegin(), pgoutputInsert()} {
			b = append(b, xlogData(m)...)
		}
		if _, err := c.Write(b); err != nil {
			return err
		}
		<-reply
		_, err := c.Write([]byte{'n', 0, 0, 0, 4}) // NoData: 5 bytes
		return err
	})
	out := &holdingConsumer{holding: make(chan struct{})}
	r := sleepyReader(conn, out, fixedWatermark(0x100))
	ctx, abort := context.WithCancel(t.Context())
	done := runReader(ctx, r, t.Context())
	awaitClosed(t, out.holding, "the consumer was not handed the insert")
	if n := mark(t, client); paced && n <= 1 {
		t.Fatalf("SO_RCVLOWAT = %d inside the transaction: the test would not test anything", n)
	}
	abort()
	if err := <-done; err != nil {
		t.Fatalf("run after an abort: %v", err)
	}
	if n := mark(t, client); paced && n != 1 {
		t.Errorf("SO_RCVLOWAT = %d after the reader returned, want 1: a small reply waits for its deadline", n)
	}
	close(reply)
	rctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // only against a hang: the reply is due at once
	defer cancel()
	if _, err := conn.ReceiveMessage(rctx); err != nil {
		t.Fatalf("the small message after the reader stopped was not read: %v", err)
	}
}

// holdingConsumer holds the first event until the context ends.
type holdingConsumer struct {
	nopConsumer
	holding chan struct{}
	once    sync.Once
}

// Apply holds the event until ctx ends. The reader applies it again when
// its context ended only to send a status (what a loaded machine's timers
// make likely): it closes holding once.
func (c *holdingConsumer) Apply(ctx context.Context, m outbox.Change) error {
	if m.Kind != outbox.ChangeEvent {
		return nil
	}
	c.once.Do(func() { close(c.holding) })
	<-ctx.Done()
	return ctx.Err()
}

// pgoutputRelation describes relation 1, public.outbox, as the default
// outbox table (the columns the default mapping needs, all text).
func pgoutputRelation() []byte {
	b := binary.BigEndian.AppendUint32([]byte{'R'}, 1)
	b = append(b, "public\x00outbox\x00"...)
	b = append(b, 'd')
	cols := []string{"id", "topic", "aggregate_id", "payload"}
	oids := []uint32{20, 25, 25, 25}
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for i, c := range cols {
		b = append(b, 0)
		b = append(append(b, c...), 0)
		b = binary.BigEndian.AppendUint32(b, oids[i])
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) // no type modifier
	}
	return b
}

// pgoutputInsert is a row of relation 1.
func pgoutputInsert() []byte {
	b := binary.BigEndian.AppendUint32([]byte{'I'}, 1)
	b = append(b, 'N')
	vals := []string{"1", "t", "k", `{"n": 1}`}
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

// mark returns the SO_RCVLOWAT of c's socket, 0 when raw I/O has none
// (rawio.SocketOf).
func mark(t *testing.T, c net.Conn) int {
	t.Helper()
	s := rawio.SocketOf(c)
	if s == nil {
		return 0
	}
	n, err := s.RecvLowat()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
