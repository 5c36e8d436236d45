package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/harness/testenv"
)

// TestDebeziumLayout: on Debezium's outbox table, `migrate --layout
// debezium` leaves the table as it is and `run --layout debezium` publishes
// what Debezium's EventRouter would (make compare-debezium compares the
// two record by record): topic outbox.event.<aggregatetype>, key
// aggregateid, value the payload's text, header id the uuid, then the
// placed columns (outboxd's own outboxd.source header after id is left
// out of the comparison); a backfilled row the same way as a streamed one. A
// flag that does not go with the layout is refused at start.
func TestDebeziumLayout(t *testing.T) {
	t.Parallel()
	db, brokers := testenv.Database(t), testenv.Brokers(t)
	pool, err := pgxpool.New(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	suffix := strings.ToLower(testenv.Name(t, "t"))
	topic := testenv.CreateTopic(t, brokers, "outbox.event."+suffix, 3)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE outboxevent (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
		aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, occurred_at timestamptz(3))`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO outboxevent VALUES ('11111111-1111-4111-8111-111111111111', $1, 'o-0', 'OrderDrafted', '{"n": 0}', NULL)`, suffix); err != nil {
		t.Fatal(err)
	}
	w := &world{url: db, brokers: strings.Join(brokers, ","), slot: testenv.Name(t, "slot"), pool: pool}
	args := []string{"--layout", "debezium", "--publication", "dbz", "--debezium-table-fields-additional-placement", "type:header:eventType,occurred_at:header"}
	if out, err := exec.Command(builtBinary, append([]string{"migrate", "--database-url", db, "--table", "public.outboxevent", "--slot", w.slot, "--create-slot=false"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate --layout debezium: %v\n%s", err, out)
	}
	// The id is a uuid: the backfill reads each key's rows in the order of occurred_at.
	p := w.start(t, append(args, "--create-slot", "--backfill-where", "true", "--backfill-order-column", "occurred_at")...)
	waitSlot(t, pool, w.slot, p)
	if _, err := pool.Exec(t.Context(), `INSERT INTO outboxevent VALUES
		('22222222-2222-4222-8222-222222222222', $1, 'o-1', 'OrderCreated', '{"total": 19.90, "items": [1, 2]}', '2026-12-02 10:11:12.5+01'),
		('33333333-3333-4333-8333-333333333333', $1, 'o-1', 'OrderDeleted', NULL, NULL)`, suffix); err != nil {
		t.Fatal(err)
	}
	recs := consumeTopics(t, brokers, 3, topic)
	source := sourceOf(t, pool, "public.outboxevent")
	want := map[string]string{
		"11111111-1111-4111-8111-111111111111": `key "o-0" value "{\"n\": 0}" headers [id=11111111-1111-4111-8111-111111111111 eventType=OrderDrafted occurred_at=<null>]`,
		"22222222-2222-4222-8222-222222222222": `key "o-1" value "{\"items\": [1, 2], \"total\": 19.90}" headers [id=22222222-2222-4222-8222-222222222222 eventType=OrderCreated occurred_at=2026-12-02T09:11:12.500Z]`,
		"33333333-3333-4333-8333-333333333333": `key "o-1" value <null> headers [id=33333333-3333-4333-8333-333333333333 eventType=OrderDeleted occurred_at=<null>]`,
	}
	for _, r := range recs {
		v := "<null>"
		if r.Value != nil {
			v = `"` + strings.ReplaceAll(string(r.Value), `"`, `\"`) + `"`
		}
		var hs []string
		for _, h := range r.Headers {
			if strings.HasPrefix(h.Key, "outboxd.") {
				continue // outboxd's own (outboxd.source): not Debezium's, checked below
			}
			hv := string(h.Value)
			if h.Value == nil {
				hv = "<null>"
			}
			hs = append(hs, h.Key+"="+hv)
		}
		got := `key "` + string(r.Key) + `" value ` + v + ` headers [` + strings.Join(hs, " ") + `]`
		id := recordHeader(r, "id")
		if want[id] != got {
			t.Errorf("record %s:\n got %s\nwant %s", id, got, want[id])
		}
		if len(r.Headers) < 2 || r.Headers[1].Key != "outboxd.source" || string(r.Headers[1].Value) != source {
			t.Errorf("record %s: headers %q, want outboxd.source=%s after id", id, r.Headers, source)
		}
		delete(want, id)
	}
	if len(want) > 0 {
		t.Errorf("never published: %v", want)
	}

	// Refused at start, naming the flag.
	cmd := exec.Command(builtBinary, "run", "--database-url", db, "--brokers", w.brokers, "--layout", "debezium", "--topic-template", "x.{type}",
		"--debezium-table-fields-additional-placement", "type:envelope")
	out, err := cmd.CombinedOutput()
	if exitCode(err) != 2 || !strings.Contains(string(out), "--layout (OUTBOXD_LAYOUT)") || !strings.Contains(string(out), "not --topic-template") ||
		!strings.Contains(string(out), "envelope placement is not supported") {
		t.Errorf("run --layout debezium --topic-template: exit %d, want 2 naming both problems:\n%s", exitCode(err), out)
	}
}
