package cdc

import (
	"net"
	"syscall"
)

// lowatSetter returns a function setting SO_RCVLOWAT on c's TCP socket, or
// nil when c is not TCP (a Unix socket). Linux wakes a TCP reader only when
// the mark is reached, while a read still returns whatever has arrived.
func lowatSetter(c net.Conn) func(int) error {
	for { // TLS, and the activity wrapper
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return func(n int) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
		}); err != nil {
			return err
		}
		return serr
	}
}
