package main

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
)

// Issue 52, "schemas, not databases": services sharing one database, a
// schema each, get one publication over their outbox tables and one slot,
// which decodes the WAL once for all of them. migrate --extend-publication
// adds each table; run streams them all with one column mapping; each
// record names its table in outboxd.source.
func TestOneSlotOverManyOutboxTables(t *testing.T) {
	t.Parallel()
	db := testenv.Database(t)
	schemas := []string{"svc_a", "svc_b", "svc_c"}
	for _, s := range schemas {
		execOn(t, db, "CREATE SCHEMA "+s)
	}
	w := &world{url: db, brokers: strings.Join(testenv.Brokers(t), ","), topic: testenv.Topic(t, 3), slot: testenv.Name(t, "slot")}
	migrate := func(args ...string) (string, error) {
		out, err := exec.Command(builtBinary, append([]string{"migrate", "--database-url", db, "--slot", w.slot}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := migrate("--table", "svc_a.outbox"); err != nil {
		t.Fatalf("migrate svc_a.outbox: %v\n%s", err, out)
	}
	// Without the flag, a second table is refused as before, naming it.
	if out, err := migrate("--table", "svc_b.outbox"); err == nil || !strings.Contains(out, "--extend-publication") {
		t.Fatalf("migrate of a second table into the publication without --extend-publication (%v) does not refuse naming the flag:\n%s", err, out)
	}
	for _, s := range schemas[1:] {
		if out, err := migrate("--table", s+".outbox", "--extend-publication"); err != nil {
			t.Fatalf("migrate %s.outbox --extend-publication: %v\n%s", s, err, out)
		}
	}
	// A table that already holds rows is not added: they would never be
	// published.
	execOn(t, db, "CREATE SCHEMA svc_d")
	if out, err := exec.Command(builtBinary, "migrate", "--database-url", db, "--table", "svc_d.outbox", "--publication", "svc_d_pub", "--create-slot=false").CombinedOutput(); err != nil {
		t.Fatalf("migrate svc_d.outbox: %v\n%s", err, out)
	}
	execOn(t, db, `INSERT INTO svc_d.outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), 'x', '{}')`)
	if out, err := migrate("--table", "svc_d.outbox", "--extend-publication"); err == nil || !strings.Contains(out, "already holds rows") {
		t.Errorf("migrate --extend-publication of a table holding rows (%v) does not refuse:\n%s", err, out)
	}
	status, err := exec.Command(builtBinary, "status", "--database-url", db, "--slot", w.slot).CombinedOutput()
	if err != nil {
		t.Fatalf("outboxd status: %v\n%s", err, status)
	}
	for _, s := range schemas {
		if !regexp.MustCompile(`table\s+` + s + `\.outbox`).Match(status) {
			t.Errorf("outboxd status does not list %s.outbox:\n%s", s, status)
		}
	}
	if regexp.MustCompile(`table\s+svc_d\.outbox`).Match(status) {
		t.Errorf("outboxd status lists svc_d.outbox, which was refused:\n%s", status)
	}

	p := w.start(t)
	// Disjoint ids, so that the consumer tells the tables' rows apart by
	// id alone; the source header says which table each came from.
	want := map[int64]string{}
	var ids []int64
	for i, s := range schemas {
		execOn(t, db, "ALTER SEQUENCE "+s+".outbox_id_seq RESTART WITH "+[]string{"1", "100001", "200001"}[i])
		conn, err := pgx.Connect(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(t.Context(), `INSERT INTO `+s+`.outbox (aggregate_id, topic, payload)
			SELECT gen_random_uuid(), $1, jsonb_build_object('n', g) FROM generate_series(1, 20) g RETURNING id`, w.topic)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		conn.Close(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range got {
			want[id] = s + ".outbox"
		}
		ids = append(ids, got...)
	}
	source := map[int64]string{}
	w.consumeEach(t, ids, time.Minute, func(r *kgo.Record, id int64) {
		for _, h := range r.Headers {
			if h.Key == "outboxd.source" {
				source[id] = string(h.Value)
			}
		}
	})
	for id, table := range want {
		if !strings.HasSuffix(source[id], "/"+table) {
			t.Errorf("id %d from %s has outboxd.source %q", id, table, source[id])
		}
	}
	p.stop(t)
}

// Issue 52, "or a mapping per table": one publication and one slot over
// outbox tables of two shapes, the default table and an application's own
// events table, each row made a record by its table's mapping
// (--table-columns), in the backfill and in the stream alike; a mapping
// naming a table the publication does not publish is refused.
func TestOneSlotOverOutboxTablesOfTwoShapes(t *testing.T) {
	t.Parallel()
	db := testenv.Database(t)
	execOn(t, db, "CREATE SCHEMA svc_a")
	execOn(t, db, "CREATE SCHEMA svc_b")
	execOn(t, db, `CREATE TABLE svc_b.events (seq bigserial PRIMARY KEY, kind text NOT NULL, aggregateid text NOT NULL, body jsonb)`)
	execOn(t, db, "ALTER SEQUENCE svc_b.events_seq_seq RESTART WITH 100001")
	w := &world{url: db, brokers: strings.Join(testenv.Brokers(t), ","), topic: testenv.Topic(t, 3), slot: testenv.Name(t, "slot")}
	events := "svc_b.events:id-column=seq,svc_b.events:topic-template=" + w.topic +
		",svc_b.events:key-column=aggregateid,svc_b.events:payload-column=body,svc_b.events:header-columns=kind"
	migrate := func(args ...string) (string, error) {
		out, err := exec.Command(builtBinary, append([]string{"migrate", "--database-url", db, "--create-slot=false"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := migrate("--table", "svc_a.outbox"); err != nil {
		t.Fatalf("migrate svc_a.outbox: %v\n%s", err, out)
	}
	// Without its own mapping the events table does not fit the flags.
	if out, err := migrate("--table", "svc_b.events", "--own-table", "--extend-publication"); err == nil || !strings.Contains(out, `missing id column`) {
		t.Fatalf("migrate of svc_b.events without its mapping (%v) is not refused for its columns:\n%s", err, out)
	}
	if out, err := migrate("--table", "svc_b.events", "--own-table", "--extend-publication", "--table-columns", events); err != nil {
		t.Fatalf("migrate svc_b.events with its mapping: %v\n%s", err, out)
	}

	insert := func(n int) (ids []int64) {
		t.Helper()
		conn, err := pgx.Connect(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		for _, q := range []string{
			`INSERT INTO svc_a.outbox (aggregate_id, topic, payload) SELECT gen_random_uuid(), '` + w.topic + `', jsonb_build_object('n', g) FROM generate_series(1, $1::int) g RETURNING id`,
			`INSERT INTO svc_b.events (kind, aggregateid, body) SELECT 'OrderPlaced', 'order-' || g, jsonb_build_object('n', g) FROM generate_series(1, $1::int) g RETURNING seq`,
		} {
			rows, err := conn.Query(t.Context(), q, n)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, got...)
		}
		return ids
	}
	ids := insert(10) // before the slot: the backfill publishes them

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a run that is not refused streams on
	defer cancel()
	refused := exec.CommandContext(ctx, builtBinary, "run", "--database-url", db, "--brokers", w.brokers, "--slot", w.slot, "--create-slot", "--backfill-where", "true",
		"--table-columns", events+",svc_c.events:id-column=seq")
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), "--table-columns gives the columns of svc_c.events, which publication outboxd does not publish") {
		t.Fatalf("run with a mapping of a table not published (%v) is not refused naming it:\n%s", err, out)
	}

	p := w.start(t, "--create-slot", "--backfill-where", "true", "--table-columns", events)
	ids = append(ids, insert(10)...)
	type record struct{ key, value, kind, source string }
	got := map[int64]record{}
	w.consumeEach(t, ids, time.Minute, func(r *kgo.Record, id int64) {
		rec := record{key: string(r.Key), value: string(r.Value)}
		for _, h := range r.Headers {
			switch h.Key {
			case "kind":
				rec.kind = string(h.Value)
			case "outboxd.source":
				rec.source = string(h.Value)
			}
		}
		got[id] = rec
	})
	for _, id := range ids {
		r := got[id]
		switch {
		case id > 100000 && (r.kind != "OrderPlaced" || !strings.HasPrefix(r.key, "order-") || !strings.HasPrefix(r.value, `{"n":`) || !strings.HasSuffix(r.source, "/svc_b.events")):
			t.Errorf("svc_b.events row %d became %+v, want its own mapping: key aggregateid, value body, header kind", id, r)
		case id <= 100000 && (r.kind != "" || len(r.key) != 36 || !strings.HasSuffix(r.source, "/svc_a.outbox")):
			t.Errorf("svc_a.outbox row %d became %+v, want the default mapping", id, r)
		}
	}
	p.stop(t)
}
