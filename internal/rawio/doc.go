// Package rawio wraps a TCP connection so that its reads and writes are
// raw, non-blocking system calls made through the connection's
// syscall.RawConn, waiting in Go's network poller as before.
//
// Why: every ordinary system call goes through the runtime's system-call
// entry, which wakes the runtime's monitor thread (sysmon) when the process
// was idle. At a steady rate outboxd is idle between transactions, so each
// transaction woke that second thread too. Measured on the 2-core test
// machine (a Go process woken by one 100-byte TCP message at a time,
// GOMAXPROCS 1, CPU from /proc): 118-148 µs of CPU per wake-up at 100
// wake-ups/s, 44-51 µs of it in the monitor thread, and 80 µs at 1,000/s;
// with raw reads 84 µs and 40 µs, the monitor thread silent.
//
// Invariant: a wrapped connection behaves as the net.Conn it wraps: every
// byte written or an error, deadlines, io.EOF at the peer's close, errors
// that are *net.OpError (Timeout() for a passed deadline, net.ErrClosed
// after Close). Where the raw path is not available (not TCP, not Linux)
// Wrap returns the connection itself.
package rawio
