package cdc

import (
	"net"
	"sync/atomic"
	"time"
)

// activity is when bytes last arrived on the replication connection (a
// large message on a slow link is still arriving, not silence, although
// no whole message has come for a while), and how many arrived in all
// (the read pacer's estimate of what pgconn read ahead).
type activity struct {
	last  atomic.Int64 // unix nanoseconds
	bytes atomic.Int64 // read in all
}

// bytesRead is how many bytes were read from the connection in all.
func (a *activity) bytesRead() int64 { return a.bytes.Load() }

func (a *activity) at() time.Time {
	if a == nil {
		return time.Time{}
	}
	return time.Unix(0, a.last.Load())
}

// activityConn notes every read that returned bytes.
type activityConn struct {
	net.Conn
	a *activity
}

func (c *activityConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.a.last.Store(time.Now().UnixNano())
		c.a.bytes.Add(int64(n))
	}
	return n, err
}

// NetConn returns the wrapped connection (the read pacer sets socket
// options on the TCP connection below: rawio.SocketOf).
func (c *activityConn) NetConn() net.Conn { return c.Conn }
