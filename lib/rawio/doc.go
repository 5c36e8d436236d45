// Package rawio owns outboxd's raw system calls on network sockets: the
// reads and writes of a wrapped TCP connection (Wrap, Dialer), made as raw,
// non-blocking system calls through the connection's syscall.RawConn while
// waiting in Go's network poller as before, and the socket options and
// queries of the replication stream's read pacer (Socket: the receive
// low-water mark, the receive queue). Nothing outside this package calls
// package syscall or x/sys/unix on a socket.
//
// Why raw: every ordinary system call goes through the runtime's
// system-call entry, which wakes the runtime's monitor thread (sysmon) when
// the process was idle. At a steady rate outboxd is idle between
// transactions, so each transaction would wake that second thread too, for
// nothing; a raw call leaves it asleep. The read pacer's socket options
// change at every transaction, so they are raw for the same reason. The
// measured cost lives with the runs in docs/bench.
//
// The switch: the environment variable OUTBOXD_RAW_IO (EnvVar) set to off
// (or false, 0) turns raw I/O off for the whole process, read at each dial
// and each Socket lookup: Wrap and Dialer then return plain connections
// (Go's own reads and writes) and SocketOf returns nil, so the read pacer
// reads as a plain reader does (no low-water mark, no read linger). Unset,
// on, true or 1 leave it on; any other value also leaves it on, and
// CheckEnv reports it (the outboxd command refuses to start). Turn it off to
// rule raw I/O out when a stream misbehaves, or where a sandbox or seccomp
// profile restricts the socket option and ioctl the pacer uses: outboxd
// then costs more CPU per event at steady rates and behaves the same
// otherwise (docs/operating.md).
//
// Invariants:
//   - A wrapped connection behaves as the net.Conn it wraps: every byte
//     written or an error, deadlines, io.EOF at the peer's close, errors that
//     are *net.OpError (Timeout() for a passed deadline, net.ErrClosed after
//     Close).
//   - Where the raw path is not available (not TCP, not Linux) or is
//     switched off, Wrap returns the connection itself and SocketOf nil:
//     callers need no fallback of their own.
//   - Every raw call retries EINTR and waits in the poller on EAGAIN; none
//     blocks a thread.
package rawio
