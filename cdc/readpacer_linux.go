package cdc

import (
	"net"
	"os"
	"syscall"
	"unsafe"
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
		var errno syscall.Errno
		if err := rc.Control(func(fd uintptr) {
			// Raw, like the reads (package rawio): the mark changes at
			// every transaction, and an ordinary system call wakes the
			// runtime's monitor thread in an idle process.
			v := int32(n)
			_, _, errno = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, uintptr(unsafe.Pointer(&v)), 4, 0)
		}); err != nil {
			return err
		}
		if errno != 0 {
			return os.NewSyscallError("setsockopt", errno)
		}
		return nil
	}
}
