package rawio

import (
	"io"
	"net"
	"testing"

	"github.com/outboxd/outboxd/harness/netfault"
)

// SocketOf must reach the TCP socket, also through wrappers with NetConn
// (how TLS connections and Wrap's come), and SetRecvLowat must set the
// kernel's mark; a connection without a TCP socket has none.
func TestSocketRecvLowat(t *testing.T) {
	t.Setenv(EnvVar, "on")
	c, _ := netfault.TCPPair(t)

	for _, conn := range []net.Conn{c, wrapped{c}, Wrap(c)} {
		s := SocketOf(conn)
		if s == nil {
			t.Fatalf("%T: no socket under a TCP connection", conn)
		}
		if err := s.SetRecvLowat(32 << 10); err != nil {
			t.Fatal(err)
		}
		if got, err := SocketOf(c).RecvLowat(); err != nil || got != 32<<10 {
			t.Fatalf("%T: SO_RCVLOWAT = %d (%v), want %d", conn, got, err, 32<<10)
		}
		if err := s.SetRecvLowat(1); err != nil {
			t.Fatal(err)
		}
		if got, err := SocketOf(c).RecvLowat(); err != nil || got != 1 {
			t.Fatalf("%T: SO_RCVLOWAT = %d (%v) after lowering it, want 1", conn, got, err)
		}
	}
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	if SocketOf(a) != nil {
		t.Error("a socket under a non-TCP connection")
	}
}

// Queued reports what waits in the TCP socket's receive queue (the read
// linger starts only when it is at most a keepalive), through a wrapper
// too.
func TestSocketQueued(t *testing.T) {
	t.Setenv(EnvVar, "on")
	c, peer := netfault.TCPPair(t)

	s := SocketOf(wrapped{c})
	if s == nil {
		t.Fatal("no socket under a TCP connection")
	}
	queued := func() int {
		t.Helper()
		n, err := s.Queued()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := queued(); n != 0 {
		t.Fatalf("queued %d bytes before anything was sent", n)
	}
	if _, err := peer.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	// One write of 100 bytes arrives on loopback as one segment: once 60
	// are read, the other 40 are queued.
	if _, err := io.ReadFull(c, make([]byte, 60)); err != nil {
		t.Fatal(err)
	}
	if n := queued(); n != 40 {
		t.Fatalf("queued %d bytes after 60 of 100 were read, want 40", n)
	}
	if _, err := io.ReadFull(c, make([]byte, 40)); err != nil {
		t.Fatal(err)
	}
	if n := queued(); n != 0 {
		t.Fatalf("queued %d bytes after all were read", n)
	}
}

// A closed connection's socket reports the error, not a made-up value.
func TestSocketClosed(t *testing.T) {
	t.Setenv(EnvVar, "on")
	c, _ := netfault.TCPPair(t)
	s := SocketOf(c)
	c.Close()
	if err := s.SetRecvLowat(4 << 10); err == nil {
		t.Error("SetRecvLowat on a closed connection: no error")
	}
	if _, err := s.RecvLowat(); err == nil {
		t.Error("RecvLowat on a closed connection: no error")
	}
	if _, err := s.Queued(); err == nil {
		t.Error("Queued on a closed connection: no error")
	}
}

type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }
