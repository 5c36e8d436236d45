package cdc

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/outbox"
)

// Regression: with the reader's idle wait at 1 s instead of 100 ms, a
// graceful stop was noticed only when the wait ran out (or when the server
// happened to send something). The server here sends nothing, and the idle
// wait, the status interval and the server timeout are an hour long: only
// the stop itself can end the wait.
func TestGracefulStopEndsTheIdleWait(t *testing.T) {
	t.Parallel()
	conn, waiting := silentServer(t)
	r := sleepyReader(conn, nopConsumer{}, fixedWatermark(0x100))
	stop, graceful := context.WithCancel(t.Context())
	done := runReader(t.Context(), r, stop)
	awaitClosed(t, waiting, "the reader did not start reading")
	graceful()
	awaitRun(t, done, "a graceful stop did not end the reader's idle wait")
}

// sleepyReader is a reader on conn whose idle wait, status interval and
// server timeout are an hour or more: only what a test does ends a wait.
func sleepyReader(conn *pgconn.PgConn, out outbox.Stage, wm Watermark) *reader {
	return &reader{conn: conn, dec: decode.NewDecoder(""), lay: layout.New(layout.DefaultColumns()), out: out, wm: wm,
		slot: "s", statusInterval: time.Hour, idleWait: time.Hour, serverTimeout: 2 * time.Hour,
		log: slog.New(slog.DiscardHandler), serverWALEnd: new(atomic.Uint64), confirmedLSN: new(atomic.Uint64)}
}

// runReader runs r until ctx ends, or stop and no transaction is open; its
// result comes on the channel.
func runReader(ctx context.Context, r *reader, stop context.Context) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.run(ctx, stop) }()
	return done
}

// awaitClosed waits up to 30 s for c to close, failing with msg.
func awaitClosed(t *testing.T, c <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatal(msg)
	}
}

// awaitRun waits up to 30 s for run's nil result, failing with msg when it
// does not come.
func awaitRun(t *testing.T, done <-chan error, msg string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after a graceful stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal(msg)
	}
}

// fakeServer connects pgconn to a fake server that completes the startup,
// reads the client's first message (the reader's first status), runs
// script, then reads and drops whatever the client sends.
func fakeServer(t *testing.T, script func(be *pgproto3.Backend, c net.Conn) error) *pgconn.PgConn {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	return fakeServerOver(t, client, server, script)
}

// fakeServerOver is fakeServer on a connection pair of the test's.
func fakeServerOver(t *testing.T, client, server net.Conn, script func(be *pgproto3.Backend, c net.Conn) error) *pgconn.PgConn {
	t.Helper()
	go func() {
		be := pgproto3.NewBackend(server, server)
		if _, err := be.ReceiveStartupMessage(); err != nil {
			return
		}
		be.Send(&pgproto3.AuthenticationOk{})
		be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
		be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		if err := be.Flush(); err != nil {
			return
		}
		if _, err := be.Receive(); err != nil {
			return
		}
		if err := script(be, server); err != nil {
			return
		}
		for {
			if _, err := be.Receive(); err != nil {
				return
			}
		}
	}()
	cfg, err := pgconn.ParseConfig("postgres://u@127.0.0.1:1/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) { return client, nil }
	conn, err := pgconn.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// silentServer is a fakeServer that sends the first bytes of a message
// and nothing more. The channel is closed once the client has read them:
// the reader is then waiting inside ReceiveMessage for the rest.
func silentServer(t *testing.T) (*pgconn.PgConn, <-chan struct{}) {
	t.Helper()
	waiting := make(chan struct{})
	conn := fakeServer(t, func(_ *pgproto3.Backend, c net.Conn) error {
		// A pipe's Write returns once the other end has read it all.
		if _, err := c.Write([]byte{'d', 0, 0}); err != nil {
			return err
		}
		close(waiting)
		return nil
	})
	return conn, waiting
}

// xlogData is a CopyData message carrying one pgoutput message as XLogData.
func xlogData(pgoutput []byte) []byte {
	b := []byte{'w'}
	b = binary.BigEndian.AppendUint64(b, 0x100) // WAL start
	b = binary.BigEndian.AppendUint64(b, 0x200) // WAL end
	b = binary.BigEndian.AppendUint64(b, 0)     // send time
	msg, err := (&pgproto3.CopyData{Data: append(b, pgoutput...)}).Encode(nil)
	if err != nil {
		panic(err) // a CopyData of this size always encodes
	}
	return msg
}

func pgoutputBegin() []byte {
	b := binary.BigEndian.AppendUint64([]byte{'B'}, 0x150) // final LSN
	b = binary.BigEndian.AppendUint64(b, 0)                // commit time
	return binary.BigEndian.AppendUint32(b, 7)             // xid
}

func pgoutputCommit() []byte {
	b := binary.BigEndian.AppendUint64([]byte{'C', 0}, 0x150) // flags, commit LSN
	b = binary.BigEndian.AppendUint64(b, 0x160)               // end LSN
	return binary.BigEndian.AppendUint64(b, 0)                // commit time
}

// A graceful stop that comes while a transaction is open lets the reader
// read it to its end (its Commit), and only then return.
func TestGracefulStopInsideATransactionReadsItToItsEnd(t *testing.T) {
	t.Parallel()
	waiting, rest := make(chan struct{}), make(chan struct{})
	conn := fakeServer(t, func(_ *pgproto3.Backend, c net.Conn) error {
		if _, err := c.Write(xlogData(pgoutputBegin())); err != nil {
			return err
		}
		// The reader reads these bytes once it has handled the Begin and
		// waits for the next message; this Write returns then.
		commit := xlogData(pgoutputCommit())
		if _, err := c.Write(commit[:3]); err != nil {
			return err
		}
		close(waiting)
		<-rest
		_, err := c.Write(commit[3:])
		return err
	})
	out := &recordingConsumer{}
	r := sleepyReader(conn, out, fixedWatermark(0x100))
	stop, graceful := context.WithCancel(t.Context())
	done := runReader(t.Context(), r, stop)
	awaitClosed(t, waiting, "the reader did not read the Begin")
	graceful()
	// Let the stop end the reader's wait before the Commit arrives.
	select {
	case err := <-done:
		t.Fatalf("run returned (%v) with the transaction open", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(rest)
	awaitRun(t, done, "the reader did not return after the Commit")
	if got := out.kinds(); len(got) != 2 || got[0] != outbox.ChangeBegin || got[1] != outbox.ChangeCommit {
		t.Errorf("consumer got %v, want the Begin and the Commit", got)
	}
}

type recordingConsumer struct {
	mu  sync.Mutex
	got []outbox.ChangeKind
}

func (c *recordingConsumer) Apply(_ context.Context, m outbox.Change) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, m.Kind)
	return nil
}

func (c *recordingConsumer) Reject(context.Context, *outbox.RowError) error { return nil }

func (c *recordingConsumer) kinds() []outbox.ChangeKind {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]outbox.ChangeKind(nil), c.got...)
}

type nopConsumer struct{}

func (nopConsumer) Apply(context.Context, outbox.Change) error     { return nil }
func (nopConsumer) Reject(context.Context, *outbox.RowError) error { return nil }

type fixedWatermark outbox.LSN

func (w fixedWatermark) Flushed() outbox.LSN { return outbox.LSN(w) }
func (fixedWatermark) Idle(outbox.LSN)       {}

// Regression: with the idle wait as the only read deadline, a transaction
// Kafka acknowledged after the stream went quiet was confirmed only when
// the wait ran out (a backlog drain's end showed a second late). The idle
// wait and the status interval are an hour long here and the server sends
// nothing after the transaction: only the reader's wait for a pending
// confirmation can send the status.
func TestQuietStreamConfirmsAnAcknowledgedTransactionPromptly(t *testing.T) {
	t.Parallel()
	confirmed := make(chan struct{})
	conn := fakeServer(t, func(be *pgproto3.Backend, c net.Conn) error {
		if _, err := c.Write(append(xlogData(pgoutputBegin()), xlogData(pgoutputCommit())...)); err != nil {
			return err
		}
		for {
			msg, err := be.Receive()
			if err != nil {
				return err
			}
			// A standby status: 'r', then the write and flush positions.
			if cd, ok := msg.(*pgproto3.CopyData); ok && len(cd.Data) >= 17 && cd.Data[0] == 'r' &&
				binary.BigEndian.Uint64(cd.Data[9:17]) >= 0x160 {
				close(confirmed)
				return nil
			}
		}
	})
	wm := &ackingWatermark{}
	wm.lsn.Store(0x100)
	r := sleepyReader(conn, &ackingConsumer{wm: wm}, wm)
	r.confirmed = 0x100
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := runReader(ctx, r, ctx)
	select {
	case <-confirmed:
	case err := <-done:
		t.Fatalf("run returned: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the acknowledged transaction was not confirmed: the reader slept through its pending confirmation")
	}
}

// ackingWatermark is the pump's watermark as the reader sees it.
type ackingWatermark struct{ lsn atomic.Uint64 }

func (w *ackingWatermark) Flushed() outbox.LSN { return outbox.LSN(w.lsn.Load()) }
func (w *ackingWatermark) Idle(outbox.LSN)     {}

// ackingConsumer acknowledges a transaction (moves the watermark to its
// end) shortly after its Commit, as Kafka's acknowledgment would, while the
// reader already waits for the next message.
type ackingConsumer struct{ wm *ackingWatermark }

func (c *ackingConsumer) Apply(_ context.Context, m outbox.Change) error {
	if m.Kind == outbox.ChangeCommit {
		time.AfterFunc(10*time.Millisecond, func() { c.wm.lsn.Store(uint64(m.Commit.EndLSN)) })
	}
	return nil
}

func (c *ackingConsumer) Reject(context.Context, *outbox.RowError) error { return nil }
