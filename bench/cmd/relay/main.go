// Command relay runs the benchmark's polling relay (package bench/relay) as
// its own process, so its memory and CPU are measured like outboxd's.
//
//	relay --database-url URL --brokers HOST:PORT [--workers 4] [--batch 500] [--drain]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/bench/relay"
)

func main() {
	url := flag.String("database-url", "", "PostgreSQL URL")
	brokers := flag.String("brokers", "", "Kafka brokers")
	var cfg relay.Config
	flag.IntVar(&cfg.Workers, "workers", 4, "concurrent claimers")
	flag.IntVar(&cfg.BatchSize, "batch", 500, "rows per claim")
	flag.DurationVar(&cfg.PollInterval, "poll-interval", 100*time.Millisecond, "wait after an empty claim")
	flag.BoolVar(&cfg.Drain, "drain", false, "exit once nothing is left to publish")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	defer pool.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MaxBufferedRecords(50000))
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	defer cl.Close()
	n, err := relay.Run(ctx, pool, cl, cfg)
	fmt.Printf("published %d\n", n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
}
