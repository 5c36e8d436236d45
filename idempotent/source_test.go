package idempotent_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/idempotent"
	"github.com/outboxd/outboxd/outbox"
)

// Two sources as outboxd names them: two databases of two clusters whose
// outbox tables both use bigserial ids.
const (
	sourceA = "7301234567890123456/orders/public.outbox"
	sourceB = "7309876543210987654/billing/public.outbox"
)

func TestSourceAndID(t *testing.T) {
	t.Parallel()
	if idempotent.SourceHeader != outbox.SourceHeader {
		t.Fatalf("idempotent.SourceHeader %q, outbox.SourceHeader %q: the consumer must read the header outboxd writes", idempotent.SourceHeader, outbox.SourceHeader)
	}
	h := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	for _, tt := range []struct {
		name    string
		headers []kgo.RecordHeader
		want    string
		noKey   bool
	}{
		{"source and id", h("id", "42", "outboxd.source", sourceA), sourceA + "\x1f42", false},
		{"another source, the same id", h("id", "42", "outboxd.source", sourceB), sourceB + "\x1f42", false},
		{"no source (an older outboxd): the bare id", h("id", "42", "type", "T"), "42", false},
		{"an empty source: the bare id", h("id", "42", "outboxd.source", ""), "42", false},
		{"the first source header counts", h("id", "42", "outboxd.source", sourceA, "outboxd.source", sourceB), sourceA + "\x1f42", false},
		{"a separator or backslash in a name is escaped", h("id", "42", "outboxd.source", "1/db/s.a\x1fb\\c"), `1/db/s.a\x1fb\\c` + "\x1f42", false},
		{"no id", h("outboxd.source", sourceA), "", true},
		{"an empty id", h("id", "", "outboxd.source", sourceA), "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := idempotent.SourceAndID(&kgo.Record{Headers: tt.headers})
			if tt.noKey {
				if !errors.Is(err, idempotent.ErrNoKey) {
					t.Errorf("SourceAndID = %q, %v; want ErrNoKey", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("SourceAndID = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// produceFrom writes one record per id as an outboxd of source would
// (source "": one older than the source header), keyed by id%7.
func (b *bed) produceFrom(t *testing.T, source string, ids ...int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(ids))
	for i, id := range ids {
		recs[i] = &kgo.Record{Topic: b.topic, Key: []byte(strconv.Itoa(id % 7)), Value: []byte(fmt.Sprintf(`{"source": %q, "n": %d}`, source, id)),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(strconv.Itoa(id))}}}
		if source != "" {
			recs[i].Headers = append(recs[i].Headers, kgo.RecordHeader{Key: idempotent.SourceHeader, Value: []byte(source)})
		}
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// insertEvent is a handler writing one business row per record, keyed by
// its event: source and id.
func insertEvent(name string) idempotent.Handler {
	return func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		key, err := idempotent.SourceAndID(r)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO business (key, consumer, value) VALUES ($1, $2, $3)`, key, name, string(r.Value))
		return err
	}
}

// Regression test for issue 37, item 3: the consumer deduplicated on the
// id header alone, so of two sources (two databases with bigserial ids)
// feeding one consumer, the second event with a colliding id was skipped
// as a duplicate: a business event silently lost. With the default key,
// source + id, every event is processed once, redeliveries of either
// source still skipped.
func TestTwoSourcesWithTheSameIDsAreEachProcessedOnce(t *testing.T) {
	t.Parallel()
	b := newBed(t, 3)
	name := testenv.Name(t, "svc")
	b.produceFrom(t, sourceA, seq(1, 50)...)
	b.produceFrom(t, sourceB, seq(1, 50)...)
	r := b.start(t, idempotent.Config{Name: name, Handler: insertEvent(name), BatchSize: 10})
	b.waitRows(t, name, 100)
	b.produceFrom(t, sourceB, seq(40, 60)...) // redelivered, and new ones
	b.produceFrom(t, sourceA, seq(1, 10)...)
	b.waitRows(t, name, 110)
	time.Sleep(time.Second) // the redeliveries are read too
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if rows, twice := b.rows(t, name); rows != 110 || twice != 0 {
		t.Errorf("%d business rows, %d events twice; want 110 (50 of one source, 60 of the other) and 0", rows, twice)
	}
}

// Two consumers with one name handed the same records with sources at once
// (two groups): each event is processed once between them. Their keys take
// the upgrade path's statements (a bare id lookup, the bare id's lock too).
func TestTwoConsumersHandedTheSameSourcedKeysAtOnceProcessThemOnce(t *testing.T) {
	t.Parallel()
	b := newBed(t, 3)
	b.produceFrom(t, sourceA, seq(1, 150)...)
	b.produceFrom(t, sourceB, seq(1, 150)...)
	name := testenv.Name(t, "svc")
	slow := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		time.Sleep(time.Millisecond) // widen the window in which both hold the key
		return insertEvent(name)(ctx, tx, r)
	}
	r1 := b.start(t, idempotent.Config{Name: name, Handler: slow, BatchSize: 10})
	r2 := b.start(t, idempotent.Config{Name: name, Handler: slow, BatchSize: 10})
	b.waitRows(t, name, 300)
	time.Sleep(time.Second) // both groups read everything
	for _, r := range []*running{r1, r2} {
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	if rows, twice := b.rows(t, name); rows != 300 || twice != 0 {
		t.Errorf("%d business rows, %d events processed twice; want 300 and 0", rows, twice)
	}
}

// Regression test for issue 37, item 3, the upgrade: processed_keys holds
// the bare ids the old default key (IDHeader) recorded. After the upgrade,
// a record with a source whose bare id was recorded before the consumer's
// first key with a source is a duplicate of a record processed before the
// upgrade, and is skipped; one whose id was not recorded, of either
// source, is processed; a bare id recorded after that first key (a record
// of an outboxd not yet upgraded) shadows nothing. With NoLegacyKeys the
// bare ids are not looked at.
func TestUpgradeFromBareIDKeys(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name         string
		noLegacyKeys bool
		reprocessed  int // records processed before the upgrade, processed again after it
	}{
		{"bare ids recorded before the upgrade still deduplicate", false, 0},
		{"NoLegacyKeys: they do not", true, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBed(t, 1)
			name := testenv.Name(t, "svc")
			// Before: an outboxd without the source header, a consumer
			// keyed by the id alone (the default then).
			b.produceFrom(t, "", seq(1, 5)...)
			old := b.start(t, idempotent.Config{Group: testenv.Name(t, "old"), Name: name, Key: idempotent.IDHeader, Handler: insertEvent(name)})
			b.waitRows(t, name, 5)
			if err := old.stop(t); err != nil {
				t.Fatal(err)
			}
			old.c.Close()

			// After: outboxd re-sends 1-5 (a kill -9 before it confirmed
			// them) with its source, then new events, and another
			// source's events with ids that were recorded bare and ids
			// that were not.
			b.produceFrom(t, sourceA, seq(1, 7)...)
			b.produceFrom(t, sourceB, seq(6, 8)...)
			upgraded := b.start(t, idempotent.Config{Group: testenv.Name(t, "new"), Name: name, Handler: insertEvent(name), NoLegacyKeys: tt.noLegacyKeys})
			want := 5 + 2 + 3 + tt.reprocessed
			b.waitRows(t, name, want)
			// A bare id recorded after the first key with a source (an
			// outboxd of source B not yet upgraded), then source A's
			// event with that id: both processed.
			b.produceFrom(t, "", 9)
			b.waitRows(t, name, want+1)
			b.produceFrom(t, sourceA, 9)
			want += 2
			b.waitRows(t, name, want)
			time.Sleep(time.Second) // anything processed twice shows
			if err := upgraded.stop(t); err != nil {
				t.Fatal(err)
			}
			var got, sourced int
			if err := b.pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE key LIKE '%' || chr(31) || '%') FROM business WHERE consumer = $1`, name).Scan(&got, &sourced); err != nil {
				t.Fatal(err)
			}
			if got != want || sourced != want-6 {
				t.Errorf("%d business rows, %d of records with a source; want %d and %d (the 5 records processed before the upgrade processed again: %d)",
					got, sourced, want, want-6, tt.reprocessed)
			}
		})
	}
}
