package readpace

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/outboxd/outboxd/lib/rawio"

	"github.com/outboxd/outboxd/harness/netfault"
)

// New finds the TCP socket under the stream's wrappers (TLS and the
// stream's byte counter offer NetConn) and paces it: an open transaction
// raises the kernel's mark, Stop lowers it, and the linger reads the real
// receive queue. With raw I/O off, or without a TCP socket, the pacer has
// nothing to set: reads never wait for a mark and the linger is off.
func TestNewPacesTheSocket(t *testing.T) {
	const linger = 20 * time.Millisecond
	tests := []struct {
		name   string
		rawIO  string // rawio.EnvVar
		pipe   bool   // net.Pipe: no socket
		paced  bool
		skipIf bool
	}{
		{name: "raw I/O on", rawIO: "on", paced: true, skipIf: runtime.GOOS != "linux"},
		{name: "raw I/O off", rawIO: "off"},
		{name: "not TCP", rawIO: "on", pipe: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skipIf {
				t.Skip("the pacer sets socket options on Linux only")
			}
			t.Setenv(rawio.EnvVar, tt.rawIO)
			var c, peer net.Conn
			if tt.pipe {
				c, peer = net.Pipe()
				t.Cleanup(func() { c.Close(); peer.Close() })
			} else {
				c, peer = netfault.TCPPair(t)
			}
			var read int64
			p := New(wrapped{c}, func() int64 { return read }, linger)
			if paced := p.setLowat != nil; paced != tt.paced {
				t.Fatalf("paced %v, want %v", paced, tt.paced)
			}
			if lingers := p.linger > 0 && p.queued != nil; lingers != tt.paced {
				t.Fatalf("lingers %v, want %v", lingers, tt.paced)
			}
			p.Received(50, time.Now(), false)
			p.Transaction(true)
			if !tt.paced {
				if p.Wait() != 0 {
					t.Fatalf("an unpaced read waits %v for a mark", p.Wait())
				}
				return
			}
			if got := kernelMark(t, c); got != maxLowat || p.Wait() != TxWait {
				t.Fatalf("inside a transaction: kernel mark %d, wait %v; want %d, %v", got, p.Wait(), maxLowat, TxWait)
			}
			p.Stop()
			if got := kernelMark(t, c); got != 1 {
				t.Fatalf("after Stop: kernel mark %d, want 1", got)
			}
			if _, err := peer.Write(make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(30 * time.Second); p.queued() != 100; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the linger sees %d bytes queued, want the 100 sent", p.queued())
				}
			}
		})
	}
}

// kernelMark is the SO_RCVLOWAT of c's socket.
func kernelMark(t *testing.T, c net.Conn) int {
	t.Helper()
	s := rawio.SocketOf(c)
	if s == nil {
		t.Fatal("no socket under the connection")
	}
	n, err := s.RecvLowat()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wrapped stands for the connections the stream reads through (a
// *tls.Conn, the stream's byte counter): they offer the one below.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }
