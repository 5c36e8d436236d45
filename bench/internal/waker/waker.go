// Package waker wakes a benchmark process at a fixed rate the way a
// stream wakes outboxd: a child process (the same executable) writes a
// 100-byte message to a TCP connection every interval, and optionally a
// second one a fixed gap after each (two wake-ups per interval, as a
// transaction's arrival and then Kafka's acknowledgment wake outboxd). It
// is shared by bench/cmd/wakecost and bench/cmd/producecost.
package waker

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Environment variables that make the executable the sending child.
const (
	envAddr     = "OUTBOXD_BENCH_WAKER_ADDR"
	envInterval = "OUTBOXD_BENCH_WAKER_INTERVAL"
	envPair     = "OUTBOXD_BENCH_WAKER_PAIR"
)

// SendIfChild makes the process the sending child when it was started as
// one by Start: it writes until the reader is gone, then exits. Call it
// first in main; in any other process it returns at once.
func SendIfChild() {
	addr := os.Getenv(envAddr)
	if addr == "" {
		return
	}
	interval, err := time.ParseDuration(os.Getenv(envInterval))
	var pair time.Duration
	if err == nil {
		pair, err = time.ParseDuration(os.Getenv(envPair))
	}
	if err == nil {
		err = send(addr, interval, pair)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "waker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Start starts the child writing a message every interval (and, with pair
// above zero, a second one pair after each) and returns the connection it
// writes to; stop closes it and ends the child.
func Start(interval, pair time.Duration) (c net.Conn, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	child := exec.Command(self)
	child.Env = append(os.Environ(), envAddr+"="+ln.Addr().String(), envInterval+"="+interval.String(), envPair+"="+pair.String())
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return nil, nil, err
	}
	end := func() { _ = child.Process.Kill(); _ = child.Wait() }
	c, err = ln.Accept()
	if err != nil {
		end()
		return nil, nil, err
	}
	return c, func() { c.Close(); end() }, nil
}

func send(addr string, interval, pair time.Duration) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	msg := make([]byte, 100)
	t := time.NewTicker(interval)
	defer t.Stop()
	for range t.C {
		if _, err := c.Write(msg); err != nil {
			return nil // the reader is done
		}
		if pair > 0 {
			time.Sleep(pair)
			if _, err := c.Write(msg); err != nil {
				return nil
			}
		}
	}
	return nil
}

// CPUTime is the process's CPU time so far (user and system).
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
