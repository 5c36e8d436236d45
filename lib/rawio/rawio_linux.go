package rawio

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Wrap returns c with raw reads and writes when c is a *net.TCPConn and
// raw I/O is on (Enabled), and c itself otherwise.
func Wrap(c net.Conn) net.Conn {
	if !Enabled() {
		return c
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &conn{TCPConn: tc, rc: rc}
}

// conn is a TCP connection with raw reads and writes; the rest (deadlines,
// Close, addresses, socket options) is the embedded connection's.
type conn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// NetConn returns the wrapped connection.
func (c *conn) NetConn() net.Conn { return c.TCPConn }

func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var (
		n     int
		errno syscall.Errno
	)
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case 0:
				n = int(r)
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait in the poller
			default:
				errno = e
				return true
			}
		}
	})
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *conn) Write(b []byte) (int, error) {
	var (
		n     int
		errno syscall.Errno
	)
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait in the poller
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// opError is err as the net package reports it: RawConn's own errors are
// already *net.OpError ("raw-read"), renamed to the operation done.
func (c *conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		e := *oe
		e.Op = op
		return &e
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

const isLinux = true
