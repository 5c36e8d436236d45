package cdc

import (
	"io"
	"net"
	"syscall"
	"testing"
)

// lowatSetter must reach the TCP socket, also through a wrapper with
// NetConn (how TLS connections come), and leave non-TCP connections alone.
func TestLowatSetterLinux(t *testing.T) {
	c, _ := tcpPair(t)

	for _, conn := range []net.Conn{c, wrapped{c}} {
		set := lowatSetter(conn)
		if set == nil {
			t.Fatalf("%T: no setter for a TCP connection", conn)
		}
		if err := set(32 << 10); err != nil {
			t.Fatal(err)
		}
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		var gerr error
		if err := rc.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil || got != 32<<10 {
			t.Fatalf("%T: SO_RCVLOWAT = %d (%v), want %d", conn, got, gerr, 32<<10)
		}
		if err := set(1); err != nil {
			t.Fatal(err)
		}
	}
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	if lowatSetter(a) != nil {
		t.Error("a setter for a non-TCP connection")
	}
}

// queuedGetter reports what waits in the TCP socket's receive queue (the
// read linger starts only when it is at most a keepalive), through a
// wrapper too, and is nil for a connection without a TCP socket.
func TestQueuedGetterLinux(t *testing.T) {
	c, peer := tcpPair(t)

	queued := queuedGetter(wrapped{c})
	if queued == nil {
		t.Fatal("no getter for a TCP connection")
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
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	if queuedGetter(a) != nil {
		t.Error("a getter for a non-TCP connection")
	}
}

// tcpPair is a connected pair of loopback TCP connections, closed at the
// test's end.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }
