package main

import (
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
