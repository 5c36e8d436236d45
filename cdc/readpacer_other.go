//go:build !linux

package cdc

import "net"

// lowatSetter: pacing is only implemented for Linux.
func lowatSetter(net.Conn) func(int) error { return nil }

// queuedGetter: the linger is only implemented for Linux.
func queuedGetter(net.Conn) func() int { return nil }
