package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
)

// eventsTable creates app.events, an outbox of another shape than
// migrate's (Debezium's names, a type and a tenant to become headers, the
// application's own event time).
func eventsTable(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(t.Context(), `CREATE SCHEMA app;
		CREATE TABLE app.events (seq bigserial PRIMARY KEY, aggregatetype text, aggregateid varchar(64),
			type text NOT NULL, payload jsonb, tenant text, occurred_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

// waitSlot waits until the slot exists and a process streams from it.
func waitSlot(t *testing.T, pool *pgxpool.Pool, slot string, p *proc) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var active bool
		err := pool.QueryRow(t.Context(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		if err == nil && active {
			return
		}
	}
	t.Fatalf("no process streams from slot %s within a minute; log:\n%s", slot, p.log())
}

// TestMappedOutboxTable: run publishes an existing table of another shape
// with the column flags: the topic from a template over a column, extra
// columns as headers (NULL as a null header value), the record timestamp
// from a column (NULL: the commit time), for a backfilled row as for a
// streamed one. An ALTER TABLE that drops a
// mapped column is noticed at the next insert: the run stops naming the
// column and the outbox id, and publishes nothing wrong.
func TestMappedOutboxTable(t *testing.T) {
	t.Parallel()
	db, brokers := testenv.Database(t), testenv.Brokers(t)
	base := testenv.Name(t, "ev")
	orders := testenv.CreateTopic(t, brokers, base+".order", 2)
	invoices := testenv.CreateTopic(t, brokers, base+".invoice", 1)
	pub := testenv.Name(t, "pub")
	pool := eventsTable(t, db)
	// Row 1 is there before run: the backfill reads it through the same mapping.
	if _, err := pool.Exec(t.Context(), `INSERT INTO app.events (aggregatetype, aggregateid, type, payload, tenant, occurred_at)
		VALUES ('invoice', 'i-0', 'InvoiceDrafted', '"draft"', 'acme', '2026-11-29 10:00:00-02')`); err != nil {
		t.Fatal(err)
	}
	mapping := []string{"--publication", pub, "--id-column", "seq", "--key-column", "aggregateid",
		"--topic-template", base + ".{aggregatetype}", "--header-columns", "type,tenant", "--timestamp-column", "occurred_at"}
	w := &world{url: db, brokers: strings.Join(brokers, ","), slot: testenv.Name(t, "slot")}
	migrate := exec.Command(builtBinary, append([]string{"migrate", "--database-url", db, "--table", "app.events", "--own-table", "--create-slot=false"}, mapping...)...)
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate --own-table: %v\n%s", err, out)
	}
	var constraints int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_constraint WHERE conrelid = 'app.events'::regclass AND conname LIKE 'outboxd%'`).Scan(&constraints); err != nil || constraints != 0 {
		t.Fatalf("migrate --own-table added %d constraints to the application's table (%v), want none", constraints, err)
	}
	p := w.start(t, append([]string{"--create-slot", "--backfill-where", "true"}, mapping...)...)
	waitSlot(t, pool, w.slot, p)

	before := time.Now().Add(-time.Second)
	if _, err := pool.Exec(t.Context(), `INSERT INTO app.events (aggregatetype, aggregateid, type, payload, tenant, occurred_at) VALUES
		('order', 'o-1', 'OrderCreated', '{"n": 1}', 'acme', '2026-11-30 22:15:01.25+00'),
		('invoice', 'i-1', 'InvoiceIssued', '{"n": 2}', NULL, NULL),
		('order', 'o-1', 'OrderPaid', '{"n": 3}', 'acme', '2026-11-30 23:00:00+01')`); err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(time.Second)

	type want struct {
		topic, key, value string
		headers           [][2]string // "\x00" for a null value
		ts                time.Time   // zero: the commit time
	}
	null := "\x00"
	src := [2]string{"outboxd.source", sourceOf(t, pool, "app.events")} // backfilled (1) as streamed
	wants := map[int64]want{
		1: {invoices, "i-0", `"draft"`, [][2]string{{"id", "1"}, src, {"type", "InvoiceDrafted"}, {"tenant", "acme"}}, time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)},
		2: {orders, "o-1", `{"n": 1}`, [][2]string{{"id", "2"}, src, {"type", "OrderCreated"}, {"tenant", "acme"}}, time.Date(2026, 11, 30, 22, 15, 1, 250e6, time.UTC)},
		3: {invoices, "i-1", `{"n": 2}`, [][2]string{{"id", "3"}, src, {"type", "InvoiceIssued"}, {"tenant", null}}, time.Time{}},
		4: {orders, "o-1", `{"n": 3}`, [][2]string{{"id", "4"}, src, {"type", "OrderPaid"}, {"tenant", "acme"}}, time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)},
	}
	got := consumeTopics(t, brokers, len(wants), orders, invoices)
	for _, r := range got {
		id, _ := strconv.ParseInt(string(r.Headers[0].Value), 10, 64)
		w, ok := wants[id]
		if !ok {
			t.Errorf("unexpected record %q on %s", r.Headers, r.Topic)
			continue
		}
		delete(wants, id)
		if r.Topic != w.topic || string(r.Key) != w.key || string(r.Value) != w.value {
			t.Errorf("id %d: topic %s key %q value %q, want %s %q %q", id, r.Topic, r.Key, r.Value, w.topic, w.key, w.value)
		}
		var hs [][2]string
		for _, h := range r.Headers {
			v := string(h.Value)
			if h.Value == nil {
				v = null
			}
			hs = append(hs, [2]string{h.Key, v})
		}
		if len(hs) != len(w.headers) {
			t.Errorf("id %d: headers %q, want %q", id, hs, w.headers)
		} else {
			for i := range hs {
				if hs[i] != w.headers[i] {
					t.Errorf("id %d: headers %q, want %q", id, hs, w.headers)
					break
				}
			}
		}
		if w.ts.IsZero() {
			if r.Timestamp.Before(before) || r.Timestamp.After(after) {
				t.Errorf("id %d: timestamp %v, want the commit time (between %v and %v)", id, r.Timestamp, before, after)
			}
		} else if !r.Timestamp.Equal(w.ts) {
			t.Errorf("id %d: timestamp %v, want %v", id, r.Timestamp, w.ts)
		}
	}

	if _, err := pool.Exec(t.Context(), `ALTER TABLE app.events DROP COLUMN tenant`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO app.events (aggregatetype, aggregateid, type, payload) VALUES ('order', 'o-2', 'OrderCreated', '{"n": 4}')`); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != exitError {
		t.Fatalf("exit code %d after the table lost a header column, want %d; log:\n%s", code, exitError, p.log())
	}
	for _, s := range []string{`missing header column \"tenant\"`, "outbox id 5"} {
		if !strings.Contains(p.log(), s) {
			t.Errorf("log does not say %s:\n%s", s, p.log())
		}
	}
	if extra := consumeTopics(t, brokers, 0, orders, invoices); len(extra) != 4 {
		t.Errorf("%d records in the topics after the stop, want the 4 before it", len(extra))
	}
}

// TestMappedColumnsCheckedAtStart: a mapping that does not fit the table
// stops migrate --own-table and run at start with one error listing every
// problem.
func TestMappedColumnsCheckedAtStart(t *testing.T) {
	t.Parallel()
	db := testenv.Database(t)
	pool := eventsTable(t, db)
	pub := testenv.Name(t, "pub")
	if _, err := pool.Exec(t.Context(), `CREATE PUBLICATION `+pgx.Identifier{pub}.Sanitize()+` FOR TABLE app.events WITH (publish = 'insert')`); err != nil {
		t.Fatal(err)
	}
	mapping := []string{"--publication", pub, "--id-column", "seq", "--key-column", "aggregateid",
		"--topic-template", "e.{region}.{payload}", "--header-columns", "type,channel", "--timestamp-column", "type"}
	problems := []string{
		`missing column "region" of the topic template`,
		`topic template column "payload" has type jsonb`,
		`missing header column "channel"`,
		`timestamp column "type" has type text`,
	}
	t.Run("migrate", func(t *testing.T) {
		out, err := exec.Command(builtBinary, append([]string{"migrate", "--database-url", db, "--table", "app.events", "--own-table", "--create-slot=false"}, mapping...)...).CombinedOutput()
		if code := exitCode(err); code != exitError {
			t.Fatalf("exit code %d, want %d; output:\n%s", code, exitError, out)
		}
		for _, s := range problems {
			if s = strings.ReplaceAll(s, `"`, `\"`); !strings.Contains(string(out), s) {
				t.Errorf("output does not say %s:\n%s", s, out)
			}
		}
	})
	t.Run("run", func(t *testing.T) {
		w := &world{url: db, brokers: strings.Join(testenv.Brokers(t), ","), slot: testenv.Name(t, "slot")}
		p := w.start(t, append([]string{"--create-slot"}, mapping...)...)
		if code := p.wait(t, time.Minute); code != exitError {
			t.Fatalf("exit code %d, want %d; log:\n%s", code, exitError, p.log())
		}
		for _, s := range problems {
			if s = strings.ReplaceAll(s, `"`, `\"`); !strings.Contains(p.log(), s) {
				t.Errorf("log does not say %s:\n%s", s, p.log())
			}
		}
	})
}

// consumeTopics reads the topics from the start until n records arrived
// and then 2 s pass without more (n 0: only the quiet period).
func consumeTopics(t *testing.T, brokers []string, n int, topics ...string) []*kgo.Record {
	t.Helper()
	return consumeTopicsWith(t, brokers, n, nil, topics...)
}

// consumeTopicsWith is consumeTopics with opts added to the consumer's
// (read_committed isolation).
func consumeTopicsWith(t *testing.T, brokers []string, n int, opts []kgo.Opt, topics ...string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	deadline := time.Now().Add(time.Minute)
	quietUntil := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		before := len(recs)
		recs = append(recs, fs.Records()...)
		if len(recs) > before {
			quietUntil = time.Now().Add(2 * time.Second)
		}
		if len(recs) >= n && time.Now().After(quietUntil) {
			return recs
		}
	}
	t.Fatalf("%d of %d records arrived within a minute", len(recs), n)
	return nil
}

// TestInsertThenDeleteKeepsTheTableEmpty: the application inserts its
// outbox row and deletes it in the same transaction, so the table never
// grows; the row is in the WAL and is published once, and the delete is
// never published, also where the publication publishes deletes.
func TestInsertThenDeleteKeepsTheTableEmpty(t *testing.T) {
	t.Parallel()
	for _, publish := range []string{"insert", "insert, update, delete"} {
		t.Run(publish, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			if _, err := w.pool.Exec(t.Context(), `ALTER PUBLICATION outboxd SET (publish = '`+publish+`')`); err != nil {
				t.Fatal(err)
			}
			p := w.start(t)
			var ids []int64
			for i := range 3 {
				tx, err := w.pool.Begin(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				var id int64
				if err := tx.QueryRow(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload)
					VALUES ('00000000-0000-4000-8000-000000000001', $1, jsonb_build_object('n', $2::int)) RETURNING id`, w.topic, i).Scan(&id); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(t.Context(), `DELETE FROM outbox WHERE id = $1`, id); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(t.Context()); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			// And a row deleted in a later transaction: that delete is not published either.
			later := w.write(t, 1, 100)
			if _, err := w.pool.Exec(t.Context(), `DELETE FROM outbox`); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, later...)
			count, values := w.consumeAll(t, ids, time.Minute)
			for _, id := range ids {
				if count[id] != 1 {
					t.Errorf("outbox id %d published %d times, want once", id, count[id])
				}
			}
			if len(count) != len(ids) {
				t.Errorf("%d distinct ids published, want %d: %v", len(count), len(ids), values)
			}
			var rows int
			if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox`).Scan(&rows); err != nil || rows != 0 {
				t.Errorf("outbox holds %d rows (%v), want none", rows, err)
			}
			if strings.Contains(p.log(), "level=ERROR") {
				t.Errorf("errors logged:\n%s", p.log())
			}
		})
	}
}

// TestCompressionCodecs: --compression chooses the codec of the batches
// outboxd sends, as the real broker stores them (the consumer sees each
// batch's codec in its attributes).
func TestCompressionCodecs(t *testing.T) {
	t.Parallel()
	// Kafka's codec numbers (record batch attributes).
	for codec, want := range map[string]uint8{"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4} {
		t.Run(codec, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.start(t, "--compression", codec)
			rows, err := w.pool.Query(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload)
				SELECT '00000000-0000-4000-8000-000000000001', $1, jsonb_build_object('n', g, 'text', repeat('compressible ', 100))
				FROM generate_series(1, 20) g RETURNING id`, w.topic)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			codecs := map[uint8]int{}
			w.consumeEach(t, ids, time.Minute, func(r *kgo.Record, _ int64) { codecs[r.Attrs.CompressionType()]++ })
			if len(codecs) != 1 || codecs[want] == 0 {
				t.Errorf("records per codec %v, want all %d (%s)", codecs, want, codec)
			}
		})
	}
}

// TestCloudEventsAndTraceContext: with --cloudevents every record is a
// CloudEvent in the Kafka binding's binary content mode, as a consumer of
// the real broker reads it (the specification's required attributes, each
// once), and W3C trace context in the headers object passes through
// unchanged.
func TestCloudEventsAndTraceContext(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(t, "--cloudevents", "--cloudevents-source", "https://example.com/orders", "--cloudevents-type", "com.example.{topic}")
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var id int64
	if err := w.pool.QueryRow(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload, headers)
		VALUES ('00000000-0000-4000-8000-000000000001', $1, '{"n": 1}', jsonb_build_object('traceparent', $2::text, 'tracestate', 'congo=t61rcWkgMzE'))
		RETURNING id`, w.topic, traceparent).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var commit time.Time
	if err := w.pool.QueryRow(t.Context(), `SELECT created_at FROM outbox WHERE id = $1`, id).Scan(&commit); err != nil {
		t.Fatal(err)
	}
	var rec *kgo.Record
	w.consumeEach(t, []int64{id}, time.Minute, func(r *kgo.Record, _ int64) { rec = r })
	got := map[string][]string{}
	var keys []string
	for _, h := range rec.Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
		keys = append(keys, h.Key)
	}
	want := map[string]string{"id": strconv.FormatInt(id, 10), "ce_specversion": "1.0", "ce_id": strconv.FormatInt(id, 10),
		"ce_source": "https://example.com/orders", "ce_type": "com.example." + w.topic, "content-type": "application/json",
		"traceparent": traceparent, "tracestate": "congo=t61rcWkgMzE"}
	for k, v := range want {
		if len(got[k]) != 1 || got[k][0] != v {
			t.Errorf("header %s = %q, want exactly %q (headers %q)", k, got[k], v, keys)
		}
	}
	if len(got["ce_time"]) != 1 {
		t.Fatalf("ce_time %q, want one (headers %q)", got["ce_time"], keys)
	}
	ceTime, err := time.Parse(time.RFC3339, got["ce_time"][0])
	// Kafka's timestamp has milliseconds; ce_time keeps the microseconds.
	if err != nil || !ceTime.Truncate(time.Millisecond).Equal(rec.Timestamp) || ceTime.Sub(commit).Abs() > time.Minute {
		t.Errorf("ce_time %q (%v): want RFC 3339, the record timestamp %v to the millisecond, near the commit %v", got["ce_time"][0], err, rec.Timestamp, commit)
	}
	if string(rec.Value) != `{"n": 1}` {
		t.Errorf("value %q, want the payload as stored", rec.Value)
	}
	if strings.Contains(p.log(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", p.log())
	}
}
