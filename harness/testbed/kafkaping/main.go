// Command kafkaping exits 0 once the Kafka broker at the given address
// answers a metadata request, and non-zero (with the reason) otherwise. The
// test bed uses it to wait for a freshly started broker.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kafkaping HOST:PORT")
		os.Exit(2)
	}
	if err := ping(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "kafkaping %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func ping(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	if len(md.Brokers) == 0 || md.Controller < 0 {
		return fmt.Errorf("metadata lists %d brokers and controller %d: not ready", len(md.Brokers), md.Controller)
	}
	return nil
}
