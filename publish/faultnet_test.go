package publish_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// faultNet stands between kfake and its clients, on the broker's side of
// every connection: it reads each request as the broker would and lets a
// test drop it, hold it past the client's timeout (the broker then applies
// it to a connection its client gave up on), or let the broker apply it and
// lose the answer. Error codes are kfake's own Fault; faultNet is for what
// kfake cannot do: lose a request or its answer on the wire.
type faultNet struct {
	hold time.Duration // how long a held request waits

	mu     sync.Mutex
	decide func(kmsg.Request) wireAction // nil: pass everything
	// held counts the requests held now. Not a WaitGroup: a hold may
	// begin (Add from zero) while a test waits, which WaitGroup forbids.
	held atomic.Int64
}

// settle waits until no request is held.
func (n *faultNet) settle() {
	for n.held.Load() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
}

// wireAction is what faultNet does with one request.
type wireAction int

const (
	pass       wireAction = iota
	drop                  // never reaches the broker; the connection closes
	hold                  // reaches the broker after faultNet.hold
	loseAnswer            // the broker applies it; the connection closes before the answer
)

func (n *faultNet) setDecide(fn func(kmsg.Request) wireAction) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.decide = fn
}

func (n *faultNet) actionFor(req kmsg.Request) wireAction {
	n.mu.Lock()
	fn := n.decide
	n.mu.Unlock()
	if fn == nil || req == nil {
		return pass
	}
	return fn(req)
}

// listen is kfake.ListenFn's function.
func (n *faultNet) listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &faultListener{Listener: ln, n: n}, nil
}

type faultListener struct {
	net.Listener
	n *faultNet
}

func (l *faultListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: c, n: l.n, lose: map[int32]bool{}}, nil
}

// faultConn is the broker's end of one client connection.
type faultConn struct {
	net.Conn
	n    *faultNet
	req  []byte // the rest of the request the broker is reading
	mu   sync.Mutex
	lose map[int32]bool // correlation ids whose answers are lost
	resp []byte         // answer bytes short of a whole frame
}

// Read gives the broker one whole request at a time, once faultNet let it
// through.
func (c *faultConn) Read(p []byte) (int, error) {
	for len(c.req) == 0 {
		frame, err := readFrame(c.Conn)
		if err != nil {
			return 0, err
		}
		req, corr := parseRequest(frame)
		switch c.n.actionFor(req) {
		case drop:
			c.Conn.Close()
			return 0, io.EOF
		case hold:
			c.n.held.Add(1)
			time.Sleep(c.n.hold)
			c.n.held.Add(-1)
		case loseAnswer:
			c.mu.Lock()
			c.lose[corr] = true
			c.mu.Unlock()
		}
		c.req = frame
	}
	k := copy(p, c.req)
	c.req = c.req[k:]
	return k, nil
}

// Write passes the broker's answers on, whole frames only, and closes the
// connection instead of passing one whose answer is to be lost.
func (c *faultConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resp = append(c.resp, p...)
	for len(c.resp) >= 8 {
		end := 4 + int(binary.BigEndian.Uint32(c.resp))
		if len(c.resp) < end {
			break
		}
		if c.lose[int32(binary.BigEndian.Uint32(c.resp[4:]))] {
			c.Conn.Close()
			return 0, net.ErrClosed
		}
		if _, err := c.Conn.Write(c.resp[:end]); err != nil {
			return 0, err
		}
		c.resp = c.resp[end:]
	}
	return len(p), nil
}

func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
	copy(frame, size[:])
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

// parseRequest decodes a request frame: size, API key, version,
// correlation id, client id, tagged fields when flexible, body. A frame it
// cannot decode gives a nil request (faultNet passes it).
func parseRequest(frame []byte) (kmsg.Request, int32) {
	b := frame[4:]
	if len(b) < 10 {
		return nil, 0
	}
	key, version := int16(binary.BigEndian.Uint16(b)), int16(binary.BigEndian.Uint16(b[2:]))
	corr := int32(binary.BigEndian.Uint32(b[4:]))
	b = b[8:]
	if n := int16(binary.BigEndian.Uint16(b)); n > 0 {
		b = b[2+int(n):]
	} else {
		b = b[2:]
	}
	req := kmsg.RequestForKey(key)
	if req == nil {
		return nil, corr
	}
	req.SetVersion(version)
	if req.IsFlexible() {
		var err error
		if b, err = skipTags(b); err != nil {
			return nil, corr
		}
	}
	if err := req.ReadFrom(b); err != nil {
		return nil, corr
	}
	return req, corr
}

func skipTags(b []byte) ([]byte, error) {
	num, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errBadTags
	}
	b = b[n:]
	for range num {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, errBadTags
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil, errBadTags
		}
		b = b[n+int(size):]
	}
	return b, nil
}

var errBadTags = errors.New("malformed tagged fields")
