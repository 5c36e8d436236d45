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
	rc := tcpRawConn(c)
	if rc == nil {
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

// queuedGetter returns a function reporting how many bytes wait in c's TCP
// receive queue (SIOCINQ, which is TIOCINQ), or nil when c is not TCP. An
// error reads as a full queue: the linger it decides is then skipped.
func queuedGetter(c net.Conn) func() int {
	rc := tcpRawConn(c)
	if rc == nil {
		return nil
	}
	return func() int {
		v, errno := int32(0), syscall.Errno(0)
		if err := rc.Control(func(fd uintptr) {
			_, _, errno = syscall.RawSyscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&v)))
		}); err != nil || errno != 0 {
			return pacerMaxLowat
		}
		return int(v)
	}
}

// tcpRawConn is the raw connection of the TCP socket under c (below TLS
// and the activity wrapper), nil when there is none.
func tcpRawConn(c net.Conn) syscall.RawConn {
	for {
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
	return rc
}
