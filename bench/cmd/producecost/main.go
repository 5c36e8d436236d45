// Command producecost measures outboxd's Kafka side alone: its producer
// (package publish, with outboxd's options and GOMAXPROCS 1, as outboxd
// runs) publishing transactions of -transaction-size records (10 by
// default) at a fixed rate. Like outboxd, it is woken by a TCP socket: a
// child process writes a 100-byte message per transaction, read through
// package rawio as outboxd reads the stream, and each message is answered
// by handing its records over at once, as outboxd hands over a transaction
// at its commit. It prints one JSON line:
// the process's CPU per event (getrusage) and the latency from handing a
// record over to Kafka's acknowledgment (p50, p99).
//
// Its p99 is the broker's and the producer's share of any publisher's
// end-to-end p99. Its CPU per event shows what franz-go's produce path
// costs with one request per transaction and nothing else to do; it is
// not a floor under outboxd's (it builds every record and callback afresh
// and records latencies; in the recorded runs it cost more than outboxd
// at some rates and less at others).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/outboxd/outboxd/bench/internal/waker"
	"github.com/outboxd/outboxd/lib/rawio"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/publish"
)

func main() {
	waker.SendIfChild()
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka bootstrap address")
	topic := flag.String("topic", "", "topic (it must exist)")
	rate := flag.Int("rate", 1000, "events per second, in transactions of -transaction-size")
	size := flag.Int("transaction-size", 10, "records per transaction")
	d := flag.Duration("duration", 10*time.Second, "how long to produce (the first tenth unmeasured)")
	linger := flag.Duration("linger", 0, "the producer's linger (outboxd: 0)")
	flag.Parse()
	if err := run(*brokers, *topic, *rate, *size, *d, *linger); err != nil {
		fmt.Fprintln(os.Stderr, "producecost:", err)
		os.Exit(1)
	}
}

func run(brokers, topic string, rate, size int, d, linger time.Duration) error {
	if topic == "" || size < 1 || rate < size {
		return fmt.Errorf("-topic is required, -transaction-size must be at least 1 and -rate at least -transaction-size")
	}
	runtime.GOMAXPROCS(1)
	p, err := publish.New(publish.Config{Brokers: []string{brokers}, Linger: linger}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Ping(context.Background()); err != nil {
		return err
	}
	nc, stop, err := waker.Start(time.Second*time.Duration(size)/time.Duration(rate), 0)
	if err != nil {
		return err
	}
	defer stop()
	c := rawio.Wrap(nc)
	var (
		mu   sync.Mutex
		lat  []float64
		wg   sync.WaitGroup
		fail error
	)
	value := []byte(`{"pad": "` + string(slices.Repeat([]byte("x"), 200)) + `"}`)
	txns := int(d * time.Duration(rate) / time.Duration(size) / time.Second)
	warm := txns / 10
	var cpu0 time.Duration
	msg := make([]byte, 100)
	for t := range txns {
		if t == warm {
			wg.Wait()
			mu.Lock()
			lat = lat[:0]
			mu.Unlock()
			cpu0 = waker.CPUTime()
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			return err
		}
		now := time.Now()
		for i := range size {
			n := t*size + i
			id := strconv.Itoa(n)
			ev := &outbox.Event{Topic: topic, Key: []byte("aggregate-" + strconv.Itoa(n%1000)), Value: value,
				Headers: []outbox.Header{{Key: "id", Value: []byte(id)}}, CommitTime: now}
			wg.Add(1)
			p.Publish(ev, func(err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil && fail == nil {
					fail = err
				}
				lat = append(lat, float64(time.Since(now).Microseconds())/1000)
			})
		}
	}
	wg.Wait()
	used := waker.CPUTime() - cpu0
	if fail != nil {
		return fail
	}
	slices.Sort(lat)
	q := func(f float64) float64 { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"events_per_second": rate, "events": len(lat), "cpu_us_per_event": float64(used.Microseconds()) / float64(len(lat)),
		"ack_p50_ms": q(0.50), "ack_p99_ms": q(0.99),
	})
}
