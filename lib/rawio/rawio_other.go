//go:build !linux

package rawio

import (
	"errors"
	"net"
)

// Wrap returns c: raw reads and writes are done on Linux only.
func Wrap(c net.Conn) net.Conn { return c }

// SocketOf returns nil: the socket options are set raw on Linux only.
func SocketOf(net.Conn) *Socket { return nil }

// SetRecvLowat is not supported here (SocketOf returns no Socket).
func (*Socket) SetRecvLowat(int) error { return errors.ErrUnsupported }

// RecvLowat is not supported here (SocketOf returns no Socket).
func (*Socket) RecvLowat() (int, error) { return 0, errors.ErrUnsupported }

// Queued is not supported here (SocketOf returns no Socket).
func (*Socket) Queued() (int, error) { return 0, errors.ErrUnsupported }

const isLinux = false
