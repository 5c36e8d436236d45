package cdc_test

import (
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/outbox"
)

// Regression test for issue 37, item 3 (the consumer merged different
// sources' ids: two databases with bigserial ids deduplicated each other
// away): every record, backfilled or streamed, names its source, the
// server's system identifier, the database and the table, in an
// outboxd.source header right after the id header.
func TestRecordsNameTheirSource(t *testing.T) {
	t.Parallel()
	b := newBed(t, "", nil)
	b.dropSlot(t)
	var want string
	if err := b.pool.QueryRow(t.Context(), `SELECT system_identifier::text || '/' || current_database() || '/public.outbox' FROM pg_control_system()`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	before, err := b.insert(t.Context(), []row{{agg: uuidFor(1), topic: b.topic, payload: `{}`}, {agg: uuidFor(2), topic: b.topic, payload: `{}`}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	r := b.start(cdc.Config{CreateSlot: true, BackfillWhere: "true"})
	c := b.consume()
	c.untilIDs(t, before, time.Minute) // backfilled
	after, err := b.insert(t.Context(), []row{{agg: uuidFor(3), topic: b.topic, payload: `{}`, headers: `{"type": "T"}`}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	recs := c.untilIDs(t, append(before, after...), time.Minute) // streamed
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if len(rec.Headers) < 2 || rec.Headers[0].Key != "id" || rec.Headers[1].Key != outbox.SourceHeader || string(rec.Headers[1].Value) != want {
			t.Errorf("record %d: headers %q, want id then %s=%q", recordID(t, rec), rec.Headers, outbox.SourceHeader, want)
		}
	}
}
