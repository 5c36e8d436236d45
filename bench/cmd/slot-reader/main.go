// Command slot-reader streams logical replication slots through pgoutput,
// as outboxd's readers do, and does nothing with what it receives but
// count the inserts and time each transaction from its commit: the floor
// of what reading the slots costs a client in one process, with the
// replication library outboxd uses (pglogrepl on pgconn). fleet-bench runs
// it on the fleet's slots and on the single pipeline's, beside outboxd in
// the same run (issue 39).
//
//	slot-reader [-publication outboxd] [-status-interval 10s] DATABASE_URL SLOT [DATABASE_URL SLOT ...]
//
// It confirms what it received every -status-interval and when the
// server asks, as pg_recvlogical does; it reads with no context, so
// that the library watches none per message. SIGUSR1 starts its counts
// and timings anew; SIGTERM or SIGINT confirms what it received, stops
// and writes them to standard output as JSON (receipts.Report).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/bench/internal/receipts"
)

func main() {
	publication := flag.String("publication", "outboxd", "publication every slot streams")
	status := flag.Duration("status-interval", 10*time.Second, "how often each slot's received position is confirmed (pg_recvlogical's default)")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 || len(args)%2 != 0 || *status <= 0 {
		fmt.Fprintln(os.Stderr, "usage: slot-reader [-publication NAME] [-status-interval D] DATABASE_URL SLOT [DATABASE_URL SLOT ...]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := &receipts.Tally{}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			t.Reset()
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < len(args); i += 2 {
		s := slotStream{url: args[i], slot: args[i+1], publication: *publication, status: *status, tally: t}
		g.Go(func() error { return s.run(gctx) })
	}
	err := g.Wait()
	if err != nil {
		fmt.Fprintln(os.Stderr, "slot-reader:", err)
	}
	if out, jerr := json.Marshal(t.Report(len(args) / 2)); jerr == nil {
		fmt.Println(string(out))
	}
	if err != nil {
		os.Exit(1)
	}
}
