package rawio

import (
	"net"
	"os"
	"syscall"
	"unsafe"
)

// SocketOf returns the TCP socket under c, looked up through the wrappers
// that offer NetConn (a *tls.Conn, Wrap's connection, the stream's own
// counters), or nil when there is none (a Unix socket, net.Pipe) or raw I/O
// is off (Enabled).
func SocketOf(c net.Conn) *Socket {
	if !Enabled() {
		return nil
	}
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
	return &Socket{rc: rc}
}

// SetRecvLowat sets the socket's receive low-water mark (SO_RCVLOWAT) to n
// bytes: Linux then wakes a reader waiting on a TCP socket only once n
// bytes have arrived, while a read still returns whatever has arrived.
func (s *Socket) SetRecvLowat(n int) error {
	v := int32(n)
	var errno syscall.Errno
	if err := s.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, uintptr(unsafe.Pointer(&v)), 4, 0)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return os.NewSyscallError("setsockopt", errno)
	}
	return nil
}

// RecvLowat returns the socket's receive low-water mark (SO_RCVLOWAT).
func (s *Socket) RecvLowat() (int, error) {
	v, size := int32(0), uint32(4)
	var errno syscall.Errno
	if err := s.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&size)), 0)
	}); err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, os.NewSyscallError("getsockopt", errno)
	}
	return int(v), nil
}

// Queued returns how many bytes wait in the socket's receive queue
// (SIOCINQ, which is TIOCINQ).
func (s *Socket) Queued() (int, error) {
	v := int32(0)
	var errno syscall.Errno
	if err := s.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&v)))
	}); err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, os.NewSyscallError("ioctl", errno)
	}
	return int(v), nil
}
