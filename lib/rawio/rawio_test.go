package rawio

import (
	"net"
	"testing"

	"golang.org/x/net/nettest"
)

// A wrapped connection must behave as the net.Conn it wraps: reads and
// writes of every size, concurrent use, deadlines (past, future, moved
// while blocked), Close unblocking a read or a write, io.EOF at the peer's
// close. nettest.TestConn is the conformance suite of the Go project for
// net.Conn implementations.
func TestWrappedConnIsANetConn(t *testing.T) {
	t.Setenv(EnvVar, "on") // whatever the environment says: this tests the raw path
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, nil, err
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}()
		d, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, nil, nil, err
		}
		a := <-accepted
		if a == nil {
			d.Close()
			return nil, nil, nil, net.ErrClosed
		}
		c1, c2 = Wrap(d), Wrap(a)
		if c1 == d && isLinux {
			t.Fatalf("Wrap returned %T, not the raw connection", c1)
		}
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}
