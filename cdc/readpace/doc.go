// Package readpace paces the reads of the replication stream's socket: it
// decides how much data the kernel should let pile up before it wakes the
// reader, and for how long the reader may wait for it, so that one wake-up
// reads many messages. Each wake-up of outboxd costs far more CPU than the
// messages it reads, and the walsender sends each message on its own, so a
// reader that keeps up would wake once per message.
//
// The pacer raises the socket's receive low-water mark (SO_RCVLOWAT,
// through package rawio): the kernel then wakes the reader only once that
// much has arrived, while data already there is read at once. Three cases
// raise it:
//
//   - A fast stream (a backlog drain): the mark is a rate window's worth of
//     data at the current rate (4-64 KiB), revised every rate window. A read
//     waits at most a short, fixed time for it.
//   - An open transaction, at any rate. pgoutput sends a transaction only
//     once it committed, all of it back to back, so after its Begin the rest
//     is already on its way: the mark goes to what the rest is expected to
//     weigh (below), else to its cap, and a read waits at most TxWait, then
//     takes whatever came. The mark drops back at the Commit, so that the
//     next transaction's Begin wakes the reader at once and an idle stream
//     waits for nothing.
//   - The read linger (cdc.Config.ReadLinger; 0 is off): after a Commit
//     that came less than the linger after the one before, while
//     transactions come fast enough that at least LingerMinTx are expected
//     per linger, with nothing but a keepalive left to read, the mark goes
//     to its cap for the linger, so that the transactions arriving meanwhile
//     are read, and published, in one wake-up. A keepalive read meanwhile
//     does not end it; any other message, or the linger's end, does. An idle
//     stream or a slow one is read at once.
//
// The expected rest of a transaction: the smallest of the last few
// transactions (Begin to Commit, as sent), less what of this one was read
// from the socket already (pgconn reads ahead of the messages it returns).
// Where transactions are alike, the reader then wakes the moment the last
// byte of the Commit arrives instead of at the end of TxWait. It needs the
// count of bytes read from the socket, which under TLS counts more than the
// stream's messages: a TLS connection waits for the cap instead, and does
// not linger.
//
// Raw I/O off (rawio.EnvVar), a connection that is not TCP, or a platform
// other than Linux: there is no socket to set the mark on, and the pacer
// does nothing. Wait is then always 0, the reader waits as a plain reader
// does, and the read linger is unavailable (it is a raised mark, not a
// timer: a plain timer would hold back a transaction that is already
// there).
//
// Invariants:
//   - A raised mark always comes with a bound: Wait is positive whenever the
//     mark is above one byte, the reader sets it as the read's deadline, and
//     a deadline that passes with nothing new (TimedOut) lowers the mark, so
//     a raised mark delays a message by at most one Wait and a stream that
//     went quiet is read at its first byte.
//   - Stop leaves the mark at one byte: replies read after the stream (the
//     final status's, the end of the copy) are not held back.
//   - The pacer never fails the stream: a socket option the kernel refuses
//     turns pacing off for the connection.
//   - Without a socket, Wait is always 0 and no system call is made.
//   - A Pacer belongs to one reader goroutine; it is not safe for
//     concurrent use.
package readpace
