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
// transaction's arrival, Kafka's acknowledgment). The second comes soon
// after the first, and a wake-up after a short rest costs less than one
// after a long rest, so twice the single figure overstates the floor. With -pair D the sender
// writes a second message D after each: the CPU per interval is then what
// the two wake-ups of one transaction cost, arrival and acknowledgment D
// apart, and at T transactions per second outboxd's CPU per transaction
// cannot fall below it.
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
	"github.com/outboxd/outboxd/lib/rawio"
)

func main() {
	waker.SendIfChild()
	rate := flag.Int("rate", 100, "messages per second")
	n := flag.Int("n", 1000, "intervals measured, each one message or, with -pair, two (after 10% unmeasured)")
	raw := flag.Bool("raw", false, "read through package rawio, as outboxd does")
	pair := flag.Duration("pair", 0, "write a second message this long after each (0: one message per interval)")
	flag.Parse()
	if err := run(*rate, *n, *raw, *pair); err != nil {
		fmt.Fprintln(os.Stderr, "wakecost:", err)
		os.Exit(1)
	}
}

func run(rate, n int, raw bool, pair time.Duration) error {
	interval := time.Second / time.Duration(max(1, rate))
	if rate <= 0 || n <= 0 || pair < 0 || pair >= interval {
		return fmt.Errorf("-rate and -n must be positive and -pair shorter than the interval")
	}
	perInterval := 1
	if pair > 0 {
		perInterval = 2
	}
	runtime.GOMAXPROCS(1)
	c, stop, err := waker.Start(interval, pair)
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
	for i := 0; i < (warm+n)*perInterval; i++ {
		if i == warm*perInterval {
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
		"rate_per_second": rate, "messages": n * perInterval, "reads_from_the_socket": wakeups, "seconds": time.Since(start).Seconds(),
		"pair_gap_us":         pair.Microseconds(),
		"cpu_us_per_message":  float64(used.Nanoseconds()) / 1e3 / float64(n*perInterval),
		"cpu_us_per_interval": float64(used.Nanoseconds()) / 1e3 / float64(n),
	})
}
