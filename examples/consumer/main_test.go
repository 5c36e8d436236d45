package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	r := &kgo.Record{Topic: "orders.created", Key: []byte("k1"), Value: []byte(`{"order": 1}`)}
	if got, want := format(r, "1"), `topic=orders.created key=k1 id=1 payload={"order": 1}`; got != want {
		t.Errorf("format = %q, want %q", got, want)
	}
}

func TestSplitList(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"":                           nil,
		"kafka:9092":                 {"kafka:9092"},
		" a:1 , b:2,,":               {"a:1", "b:2"},
		"orders.created,orders.paid": {"orders.created", "orders.paid"},
	} {
		if got := splitList(in); !slices.Equal(got, want) {
			t.Errorf("splitList(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMissingConfigurationIsUsageError(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{"CONSUMER_BROKERS": "kafka:9092", "CONSUMER_DATABASE_URL": "postgres://db/app"},
		{"CONSUMER_BROKERS": "kafka:9092", "CONSUMER_TOPICS": "orders.created"},
	} {
		var stderr strings.Builder
		if code := run(func(k string) string { return env[k] }, io.Discard, &stderr); code != 2 {
			t.Fatalf("exit code %d, want 2", code)
		}
		for _, v := range []string{"CONSUMER_TOPICS", "CONSUMER_DATABASE_URL"} {
			if !strings.Contains(stderr.String(), v) {
				t.Errorf("stderr does not name %s: %s", v, stderr.String())
			}
		}
	}
}

// Regression (issue 37): the example stored the outbox id as bigint and
// failed on every record of an outbox table with uuid ids.
func TestHandleStoresAnyOutboxID(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// An install of the earlier example, with its bigint column.
	if _, err := pool.Exec(ctx, `CREATE TABLE example_orders (outbox_id bigint NOT NULL, topic text NOT NULL, aggregate_id text NOT NULL,
		payload jsonb NOT NULL, received_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"42", "3f1e2d4c-0000-4000-8000-00000000002a", "evt-7"} {
		r := &kgo.Record{Topic: "orders.created", Key: []byte("k"), Value: []byte(`{"n": 1}`),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return handle(ctx, tx, r, io.Discard) })
		if err != nil {
			t.Errorf("handling a record with outbox id %q: %v", id, err)
		}
	}
}
