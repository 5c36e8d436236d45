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
	"os"
	"runtime"
	"time"

	"github.com/outboxd/outboxd/bench/internal/waker"
	"github.com/outboxd/outboxd/internal/rawio"
)

func main() {
	waker.SendIfChild()
	rate := flag.Int("rate", 100, "messages per second")
	n := flag.Int("n", 1000, "messages measured (after 10% unmeasured)")
	raw := flag.Bool("raw", false, "read through package rawio, as outboxd does")
	flag.Parse()
	if err := run(*rate, *n, *raw); err != nil {
		fmt.Fprintln(os.Stderr, "wakecost:", err)
		os.Exit(1)
	}
}

func run(rate, n int, raw bool) error {
	if rate <= 0 || n <= 0 {
		return fmt.Errorf("-rate and -n must be positive")
	}
	runtime.GOMAXPROCS(1)
	c, stop, err := waker.Start(time.Second / time.Duration(rate))
	if err != nil {
		return err
	}
	defer stop()
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
			cpu0, start = waker.CPUTime(), time.Now()
			wakeups = 0
		}
		if r.Buffered() < len(msg) {
			wakeups++ // the next read goes to the socket
		}
		if _, err := r.Read(msg); err != nil {
			return err
		}
	}
	used := waker.CPUTime() - cpu0
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"rate_per_second": rate, "messages": n, "reads_from_the_socket": wakeups, "seconds": time.Since(start).Seconds(),
		"cpu_us_per_message": float64(used.Nanoseconds()) / 1e3 / float64(n),
	})
}
