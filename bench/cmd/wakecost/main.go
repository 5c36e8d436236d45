// Command wakecost measures what one wake-up of an idle Go process costs on
// this machine: the floor under any steady-rate CPU figure.
//
// A sender process writes a 100-byte message to a TCP connection at a fixed
// rate; the receiver (this process, GOMAXPROCS 1, as outboxd runs) reads
// each through Go's network poller and does nothing else. The receiver's
// own CPU time (getrusage) over the messages, divided by their count, is
// the cost of being woken once: the kernel's and the hypervisor's part and
// the Go scheduler's (netpoll, sysmon). It prints one JSON line.
//
// With -raw the receiver reads as outboxd does, through package rawio (raw
// system calls, which leave the runtime's monitor thread asleep).
//
// outboxd needs at least two wake-ups per transaction at a steady rate (the
// transaction's arrival, Kafka's acknowledgment), so at T transactions per
// second its CPU per transaction cannot fall below twice this figure
// measured at T per second.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/internal/rawio"
)

func main() {
	rate := flag.Int("rate", 100, "messages per second")
	n := flag.Int("n", 1000, "messages measured (after 10% unmeasured)")
	send := flag.String("send", "", "internal: be the sender, writing to this address")
	raw := flag.Bool("raw", false, "read through package rawio, as outboxd does")
	flag.Parse()
	if err := run(*rate, *n, *send, *raw); err != nil {
		fmt.Fprintln(os.Stderr, "wakecost:", err)
		os.Exit(1)
	}
}

func run(rate, n int, send string, raw bool) error {
	if rate <= 0 || n <= 0 {
		return fmt.Errorf("-rate and -n must be positive")
	}
	interval := time.Second / time.Duration(rate)
	if send != "" {
		return sender(send, interval)
	}
	runtime.GOMAXPROCS(1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(self, "-send", ln.Addr().String(), "-rate", fmt.Sprint(rate))
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return err
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	if raw {
		c = rawio.Wrap(c)
	}
	warm := max(1, n/10)
	r := bufio.NewReaderSize(c, 64<<10)
	msg := make([]byte, 100)
	var cpu0 time.Duration
	var start time.Time
	wakeups := 0
	for i := 0; i < warm+n; i++ {
		if i == warm {
			cpu0, start = cpuTime(), time.Now()
			wakeups = 0
		}
		if r.Buffered() < len(msg) {
			wakeups++ // the next read goes to the socket
		}
		if _, err := r.Read(msg); err != nil {
			return err
		}
	}
	used := cpuTime() - cpu0
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"rate_per_second": rate, "messages": n, "reads_from_the_socket": wakeups, "seconds": time.Since(start).Seconds(),
		"cpu_us_per_message": float64(used.Nanoseconds()) / 1e3 / float64(n),
	})
}

func sender(addr string, interval time.Duration) error {
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
			return nil // the receiver is done
		}
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
