package rawio

import "syscall"

// Socket is the TCP socket under a connection, for the read pacer's socket
// option and query (SetRecvLowat, Queued), made as raw system calls: they
// change at every transaction, and an ordinary system call would wake the
// runtime's monitor thread in an idle process. SocketOf returns one; its
// methods may be called from any goroutine.
type Socket struct {
	rc syscall.RawConn
}
