// Command consumer is an idempotent consumer of the records outboxd
// publishes, built with package idempotent; docker-compose.yml runs it to
// show events flowing.
//
// It joins a consumer group and, for each record, in one PostgreSQL
// transaction: records the record's `id` header (the outbox id, the same on
// every redelivery) in processed_keys, and only when that is new, writes the
// order into its own table example_orders and prints one line
//
//	topic=orders.created key=<aggregate_id> id=<outbox id> payload=<json>
//
// A redelivery (after an outboxd crash, a rebalance, a restart before the
// offsets were committed, a replay from the beginning) finds its key and is
// skipped: example_orders holds each order once, across restarts too.
// Offsets are committed after the database commit.
//
// Configuration, from the environment:
//
//	CONSUMER_BROKERS       Kafka bootstrap brokers, HOST:PORT[,HOST:PORT...] (required)
//	CONSUMER_TOPICS        topics to consume, comma-separated (required)
//	CONSUMER_DATABASE_URL  PostgreSQL URL of the consumer's own database (required)
//	CONSUMER_GROUP         consumer group (default example-consumer)
//
// SIGINT or SIGTERM finishes the batch in hand, commits it, leaves the group
// and exits 0. A record that keeps failing stops it with exit 1.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/idempotent"
)

func main() {
	os.Exit(run(os.Getenv, os.Stdout, os.Stderr))
}

func run(getenv func(string) string, stdout, stderr io.Writer) int {
	brokers := splitList(getenv("CONSUMER_BROKERS"))
	topics := splitList(getenv("CONSUMER_TOPICS"))
	dbURL := getenv("CONSUMER_DATABASE_URL")
	group := getenv("CONSUMER_GROUP")
	if group == "" {
		group = "example-consumer"
	}
	if len(brokers) == 0 || len(topics) == 0 || dbURL == "" {
		fmt.Fprintln(stderr, "consumer: set CONSUMER_BROKERS (HOST:PORT,...), CONSUMER_TOPICS (topic,...) and CONSUMER_DATABASE_URL; CONSUMER_GROUP is optional")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, nil))

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		log.Error("consumer: connecting to PostgreSQL", "err", err)
		return 1
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, schema); err != nil {
		log.Error("consumer: creating example_orders", "err", err)
		return 1
	}
	c, err := idempotent.New(ctx, idempotent.Config{
		Brokers: brokers, Group: group, Topics: topics, Log: log,
		Handler: func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
			return handle(ctx, tx, r, stdout)
		},
	}, pool)
	if err != nil {
		log.Error("consumer: starting", "err", err)
		return 1
	}
	defer c.Close() // leaves the group
	if err := c.Run(ctx); err != nil {
		log.Error("consumer: stopped", "err", err)
		return 1
	}
	return 0
}

// schema is the business table: one row per order, written in the same
// transaction that records the record's key. The outbox id is text: an
// outbox table's id may be an integer, a uuid or text (a table created by
// an earlier version with a bigint column is converted).
const schema = `CREATE TABLE IF NOT EXISTS example_orders (
    outbox_id    text        NOT NULL,
    topic        text        NOT NULL,
    aggregate_id text        NOT NULL,
    payload      jsonb       NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE example_orders ALTER COLUMN outbox_id TYPE text`

// handle is the business logic: store the order, print it.
func handle(ctx context.Context, tx pgx.Tx, r *kgo.Record, out io.Writer) error {
	id, err := idempotent.IDHeader(r)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO example_orders (outbox_id, topic, aggregate_id, payload) VALUES ($1, $2, $3, $4)`,
		id, r.Topic, string(r.Key), string(r.Value)); err != nil {
		return fmt.Errorf("storing order %s: %w", id, err)
	}
	fmt.Fprintln(out, format(r, id))
	return nil
}

// format is the line printed for a processed record.
func format(r *kgo.Record, id string) string {
	return fmt.Sprintf("topic=%s key=%s id=%s payload=%s", r.Topic, r.Key, id, r.Value)
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
