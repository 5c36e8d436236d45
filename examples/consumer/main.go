// Command consumer is a minimal idempotent consumer of the records outboxd
// publishes, used by docker-compose.yml to show events flowing.
//
// It joins a consumer group, prints every record as one line
//
//	topic=orders.created key=<aggregate_id> id=<outbox id> payload=<json>
//
// and drops redeliveries by the record's `id` header, the outbox row's id,
// which outboxd sets on every record and which stays the same when a record is
// sent again (after an outboxd crash, or a consumer rebalance or restart
// before its offsets were committed). A redelivery prints
// `duplicate id=N skipped` instead.
//
// Offsets are committed after each polled batch has been processed
// (at-least-once), and rebalances are held off while a batch is being
// processed so that the commit only covers partitions this member still owns.
//
// Configuration, from the environment:
//
//	CONSUMER_BROKERS  Kafka bootstrap brokers, HOST:PORT[,HOST:PORT...] (required)
//	CONSUMER_TOPICS   topics to consume, comma-separated (required)
//	CONSUMER_GROUP    consumer group (default example-consumer)
//
// SIGINT or SIGTERM finishes the batch in hand, commits it, leaves the group
// and exits 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	os.Exit(run(os.Getenv, os.Stdout, os.Stderr))
}

func run(getenv func(string) string, stdout, stderr io.Writer) int {
	brokers := splitList(getenv("CONSUMER_BROKERS"))
	topics := splitList(getenv("CONSUMER_TOPICS"))
	group := getenv("CONSUMER_GROUP")
	if group == "" {
		group = "example-consumer"
	}
	if len(brokers) == 0 || len(topics) == 0 {
		fmt.Fprintln(stderr, "consumer: set CONSUMER_BROKERS (HOST:PORT,...) and CONSUMER_TOPICS (topic,...); CONSUMER_GROUP is optional")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // a new group reads from the beginning
		kgo.DisableAutoCommit(),                           // commit only what was processed
		kgo.BlockRebalanceOnPoll(),                        // no rebalance between poll and commit
	)
	if err != nil {
		fmt.Fprintln(stderr, "consumer:", err)
		return 1
	}
	defer cl.Close() // leaves the group

	fmt.Fprintf(stderr, "consumer: group %s consuming %s from %s\n", group, strings.Join(topics, ","), strings.Join(brokers, ","))
	seen := newDeduper()
	for {
		fetches := cl.PollFetches(ctx)
		if fetches.IsClientClosed() {
			return 0
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				fmt.Fprintf(stderr, "consumer: fetching %s[%d]: %v\n", topic, partition, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			fmt.Fprintln(stdout, seen.handle(r))
		})
		// Commit what was just processed, also when a signal arrived meanwhile.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := cl.CommitUncommittedOffsets(cctx); err != nil {
			fmt.Fprintln(stderr, "consumer: committing offsets:", err)
		}
		cancel()
		cl.AllowRebalance()
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "consumer: stopping")
			return 0
		}
	}
}

// deduper remembers the ids it has processed.
//
// In memory only, and growing without bound: enough for an example, and it
// forgets everything on restart. A real consumer records each processed id
// in its own database, in the same transaction as the business write the
// record causes, e.g.
//
//	INSERT INTO processed_events (id) VALUES ($1) ON CONFLICT DO NOTHING
//
// and skips the business write when that inserted no row. Then a redelivery
// is harmless however late it comes, and the offset commit can lag freely.
type deduper struct {
	seen map[string]struct{}
}

func newDeduper() *deduper { return &deduper{seen: map[string]struct{}{}} }

// handle processes one record (here: formats it) unless its id was processed
// before, and returns the line to print. A record without an id header cannot
// be deduplicated and is always processed.
func (d *deduper) handle(r *kgo.Record) string {
	id, ok := header(r, "id")
	if ok {
		if _, dup := d.seen[id]; dup {
			return "duplicate id=" + id + " skipped"
		}
		d.seen[id] = struct{}{}
	}
	return format(r, id)
}

// format is the line printed for a processed record.
func format(r *kgo.Record, id string) string {
	return fmt.Sprintf("topic=%s key=%s id=%s payload=%s", r.Topic, r.Key, id, r.Value)
}

// header returns the value of the record's first header named key.
func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
