package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
)

// recordHeader returns the value of r's first header named key ("" if none).
func recordHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestTableLessEvents: with --message-prefix, outboxd_emit's messages are
// published in commit order together with the outbox rows of the same
// transaction (same key: same partition, in order), the id header is the
// message's LSN, a rolled-back transaction's message is never published,
// and other prefixes are ignored. outboxd_emit refuses a topic Kafka
// would refuse. A malformed envelope stops the run naming the message;
// restarted with a dead-letter topic, it goes there, and so does a
// non-transactional message under the prefix, and the stream moves past
// both.
func TestTableLessEvents(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	const key = "00000000-0000-4000-8000-0000000000aa"
	args := []string{"--message-prefix", "outboxd.event"}
	p := w.start(t, args...)

	// Commit order: row, message, row, message, in one transaction.
	var ids []string
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		for i := range 2 {
			var id, lsn string
			if err := tx.QueryRow(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ($1, $2, jsonb_build_object('row', $3::int)) RETURNING id::text`,
				key, w.topic, i).Scan(&id); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT outboxd_emit($1, jsonb_build_object('message', $2::int), $3, '{"type": "Shipped"}')::text`,
				w.topic, i, key).Scan(&lsn); err != nil {
				return err
			}
			ids = append(ids, id, lsn)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Never published: a rolled-back message, and another prefix's.
	if tx, err := w.pool.Begin(ctx); err != nil {
		t.Fatal(err)
	} else {
		if _, err := tx.Exec(ctx, `SELECT outboxd_emit($1, '{"rolled": "back"}', $2)`, w.topic, key); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
	}
	if _, err := w.pool.Exec(ctx, `SELECT pg_logical_emit_message(true, 'app.audit', 'not an envelope'),
		pg_logical_emit_message(true, 'outboxd.event.v2', 'not an envelope')`); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if _, err := w.pool.Exec(ctx, `SELECT outboxd_emit('bad topic!', '{}')`); !errors.As(err, &pgErr) || pgErr.Code != "23514" || !strings.Contains(pgErr.Message, "not a valid Kafka topic name") {
		t.Errorf("outboxd_emit with an invalid topic: %v, want a check violation naming the rule", err)
	}

	recs := consumeTopics(t, strings.Split(w.brokers, ","), len(ids), w.topic)
	msgSource := sourceOf(t, w.pool, "message:outboxd.event")
	var got []string
	for _, r := range recs {
		got = append(got, recordHeader(r, "id"))
	}
	if strings.Join(got, " ") != strings.Join(ids, " ") {
		t.Fatalf("records %q, want exactly %q in commit order", got, ids)
	}
	for i, r := range recs {
		if i%2 == 0 {
			continue
		}
		want := `{"message": ` + strconv.Itoa(i/2) + `}`
		if string(r.Key) != key || string(r.Value) != want || recordHeader(r, "type") != "Shipped" || len(r.Headers) != 3 ||
			r.Headers[1].Key != "outboxd.source" || string(r.Headers[1].Value) != msgSource {
			t.Errorf("message record key %q value %q headers %q, want key %s, value %s, headers id, outboxd.source=%s and type", r.Key, r.Value, r.Headers, key, want, msgSource)
		}
		if r.Timestamp.Sub(recs[i-1].Timestamp).Abs() > time.Millisecond {
			t.Errorf("message timestamp %v, want its transaction's commit time %v", r.Timestamp, recs[i-1].Timestamp)
		}
	}

	// A malformed envelope stops the run, naming the message.
	var bad string
	if err := w.pool.QueryRow(ctx, `SELECT pg_logical_emit_message(true, 'outboxd.event', '{"topic": ')::text`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit code %d after a malformed envelope, want 1; log:\n%s", code, p.log())
	}
	if log := p.log(); !strings.Contains(log, "decoding logical decoding message outboxd.event at "+bad) || !strings.Contains(log, "envelope is not valid JSON") {
		t.Fatalf("the log does not name the message at %s and the problem:\n%s", bad, log)
	}

	// With a dead-letter topic it goes there, as does a non-transactional
	// message under the prefix; the row after them is published.
	dlq := testenv.CreateTopic(t, strings.Split(w.brokers, ","), testenv.Name(t, "dlq"), 1)
	var standalone, after string
	if err := w.pool.QueryRow(ctx, `SELECT pg_logical_emit_message(false, 'outboxd.event', jsonb_build_object('topic', $1::text, 'payload', 7)::text)::text`,
		w.topic).Scan(&standalone); err != nil {
		t.Fatal(err)
	}
	if err := w.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ($1, $2, '{"after": 1}') RETURNING id::text`, key, w.topic).Scan(&after); err != nil {
		t.Fatal(err)
	}
	p = w.start(t, append(args, "--dead-letter-topic", dlq)...)
	dead := consumeTopics(t, strings.Split(w.brokers, ","), 2, dlq)
	if len(dead) != 2 || recordHeader(dead[0], "id") != bad || recordHeader(dead[1], "id") != standalone ||
		recordHeader(dead[0], "outboxd.dlq.table") != "message:outboxd.event" || !strings.Contains(recordHeader(dead[1], "outboxd.dlq.error"), "non-transactional") ||
		recordHeader(dead[1], "outboxd.dlq.topic") != w.topic || string(dead[1].Value) != "7" {
		for _, d := range dead {
			t.Logf("dead letter %q: %q", d.Value, d.Headers)
		}
		t.Fatalf("want the malformed message %s and the non-transactional one %s dead-lettered, with what could be read of them", bad, standalone)
	}
	recs = consumeTopics(t, strings.Split(w.brokers, ","), len(ids)+1, w.topic)
	if last := recordHeader(recs[len(recs)-1], "id"); len(recs) != len(ids)+1 || last != after {
		t.Fatalf("after the dead letters: %d records, the last %s; want %d, the last %s", len(recs), last, len(ids)+1, after)
	}
	// The slot moves past them: a restart sends nothing again.
	var confirmedPast bool
	testenv.Eventually(t, 30*time.Second, "the slot confirmed past the dead letters", func() bool {
		err := w.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn > $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, w.slot, standalone).Scan(&confirmedPast)
		return err == nil && confirmedPast
	})
}
