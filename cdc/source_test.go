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
//
// Issue 49, item 13: the system identifier changes with pg_upgrade or a
// move to a new cluster, and so did every record's source: consumers
// processed the recovery overlap again. A pipeline may name its source
// (Source), which then stands for the system identifier and database.
func TestRecordsNameTheirSource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		source string
		want   string // SQL for the header's value
	}{
		{name: "the server's", want: `SELECT system_identifier::text || '/' || current_database() || '/public.outbox' FROM pg_control_system()`},
		{name: "named", source: "orders-db", want: `SELECT 'orders-db/public.outbox'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBed(t, "", nil)
			b.dropSlot(t)
			var want string
			if err := b.pool.QueryRow(t.Context(), tt.want).Scan(&want); err != nil {
				t.Fatal(err)
			}
			before, err := b.insert(t.Context(), []row{{agg: uuidFor(1), topic: b.topic, payload: `{}`}, {agg: uuidFor(2), topic: b.topic, payload: `{}`}}, true, false)
			if err != nil {
				t.Fatal(err)
			}
			r := b.start(cdc.Config{CreateSlot: true, BackfillWhere: "true", Source: tt.source})
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
		})
	}
}
