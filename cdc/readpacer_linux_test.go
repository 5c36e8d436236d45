package cdc

import (
	"net"
	"syscall"
	"testing"
)

// lowatSetter must reach the TCP socket, also through a wrapper with
// NetConn (how TLS connections come), and leave non-TCP connections alone.
func TestLowatSetterLinux(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

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

type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }
