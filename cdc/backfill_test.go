package cdc_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/slot"
)

// dropSlot drops the bed's slot (inactive) as an operator or a failover would lose it.
func (b *bed) dropSlot(t *testing.T) {
	t.Helper()
	if _, err := b.pool.Exec(t.Context(), `SELECT pg_drop_replication_slot($1)`, b.slot); err != nil {
		t.Fatal(err)
	}
}

func (b *bed) slotExists(t *testing.T) bool {
	t.Helper()
	var ok bool
	if err := b.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, b.slot).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// Regression test for the lost slot of issue 14: run created a new slot at
// the current position with only a warning, and the rows committed while
// the slot was gone never reached Kafka.
func TestMissingSlotStopsWithTheRecoveryCommand(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	tests := []struct {
		name     string
		recorded bool
		want     []string
	}{
		{"never created", false, []string{"outboxd migrate", "`CreateSlot = true` and `BackfillWhere = \"<predicate>\"`"}},
		{"lost", true, []string{"is gone", "in no slot", "CreateSlot = true and BackfillWhere = \"created_at >= '2026-11-30T09:55:00Z'\"", "Kafka acknowledged commits up to 2026-11-30T10:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBed(t, "", nil)
			b.dropSlot(t)
			if tt.recorded {
				rec := slot.Record{Slot: b.slot, SystemID: "1", Timeline: 1, CreatedBy: slot.CreatedByMigrate}
				if err := slot.SaveRecord(t.Context(), b.pool, rec); err != nil {
					t.Fatal(err)
				}
				if err := slot.RecordAcknowledged(t.Context(), b.pool, b.slot, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := b.insert(t.Context(), []row{{agg: uuidFor(1), topic: b.topic, payload: `{}`}}, true, false); err != nil {
				t.Fatal(err)
			}
			err := b.start(cdc.Config{}).wait(time.Minute)
			if !errors.Is(err, slot.ErrMissing) || !cdc.IsPermanent(err) {
				t.Fatalf("Run = %v, want a permanent error wrapping slot.ErrMissing", err)
			}
			for _, w := range append(tt.want, b.slot) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
			if b.slotExists(t) {
				t.Error("the slot was created without --create-slot")
			}
		})
	}
}

// writer inserts 10-row transactions with its own aggregate id until
// stopped, and returns the ids it committed; commits counts them.
func (b *bed) writer(ctx context.Context, t *testing.T, agg int, wg *sync.WaitGroup, out *[]int64, commits *atomic.Int64) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			rows := make([]row, 10)
			for i := range rows {
				rows[i] = row{agg: uuidFor(agg), topic: b.topic, payload: `{}`}
			}
			ids, err := b.insert(context.Background(), rows, true, false)
			if err != nil {
				t.Error(err)
				return
			}
			*out = append(*out, ids...)
			commits.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
}

// The backfill and the slot meet with no gap and no overlap: rows
// committed before the slot's snapshot come from the backfill, later ones
// from the stream, each once, while writers commit throughout.
func TestBackfillThenStreamHasNoGapAndNoOverlap(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b := newBed(t, "", nil)
	b.dropSlot(t)
	var before []int64
	for range 30 {
		rows := make([]row, 10)
		for i := range rows {
			rows[i] = row{agg: uuidFor(99), topic: b.topic, payload: `{"before": true}`}
		}
		ids, err := b.insert(t.Context(), rows, true, false)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, ids...)
	}
	excluded := before[:5] // the predicate leaves these out
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	written := make([][]int64, 3)
	var commits atomic.Int64
	for w := range written {
		b.writer(ctx, t, w, &wg, &written[w], &commits)
	}
	// Issue 49, item 30: fixed sleeps gave the writers their share on
	// either side of the slot's start, which a loaded machine may not
	// fill. The test waits for commits on each side instead: some before
	// the slot exists (the backfill's share), some after the backfill was
	// delivered, which is after the slot's snapshot (the stream's).
	waitCommits := func(n int64, what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for commits.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the writers committed %d transactions, want %d %s", commits.Load(), n, what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitCommits(5, "before the slot")
	r := b.start(cdc.Config{CreateSlot: true, BackfillWhere: "id > " + strconv.FormatInt(excluded[len(excluded)-1], 10)})
	c := b.consume()
	c.untilIDs(t, before[5:], 2*time.Minute)
	waitCommits(commits.Load()+5, "after the backfill") // the stream's share
	stop()
	wg.Wait()
	want := append([]int64(nil), before[5:]...)
	for _, ids := range written {
		want = append(want, ids...)
	}
	c.untilIDs(t, want, 2*time.Minute)
	recs := c.settle(t, 2*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	assertOncePerIDInOrder(t, recs, want, excluded)
	st := r.st.Stats()
	if st.BackfillRows != st.BackfillTotal {
		t.Errorf("backfill rows %d of %d, want all", st.BackfillRows, st.BackfillTotal)
	}
	// The meeting point was crossed by the writers: some of their rows came
	// from the snapshot, some from the stream.
	if fromWriters := st.BackfillTotal - int64(len(before)-5); fromWriters <= 0 || int64(len(want)) <= st.BackfillTotal {
		t.Errorf("%d writer rows in the backfill of %d, %d rows in all: the writers did not commit on both sides of the slot's start", fromWriters, st.BackfillTotal, len(want))
	}
	rec, found, err := slot.ReadRecord(t.Context(), b.pool, b.slot)
	if err != nil || !found || !rec.BackfillDone || rec.BackfillRows != st.BackfillTotal || rec.ConsistentPoint == 0 || rec.CreatedBy != slot.CreatedByRun {
		t.Errorf("outboxd_slots = %+v (found %v, %v), want a done backfill of %d rows with its consistent point", rec, found, err, st.BackfillTotal)
	}
}

// A backfill that failed before Kafka acknowledged all of it is recorded
// as pending; the next start, even without --create-slot, drops the slot
// (never streamed from) and backfills again whole from a new snapshot.
func TestInterruptedBackfillRunsAgainWhole(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b := newBed(t, "", nil)
	b.dropSlot(t)
	var want []int64
	for i := range 20 {
		topic := b.topic
		if i == 10 {
			topic = b.topic + "_missing" // Kafka refuses it for good: the backfill stops here
		}
		ids, err := b.insert(t.Context(), []row{{agg: uuidFor(1), topic: topic, payload: `{}`}, {agg: uuidFor(1), topic: topic, payload: `{}`}}, true, false)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	err := b.start(cdc.Config{CreateSlot: true, BackfillWhere: "true"}).wait(2 * time.Minute)
	if err == nil || !strings.Contains(err.Error(), "backfill") {
		t.Fatalf("Run = %v, want the backfill's failure", err)
	}
	rec, found, err := slot.ReadRecord(t.Context(), b.pool, b.slot)
	if err != nil || !found || !rec.BackfillPending() || rec.BackfillWhere != "true" {
		t.Fatalf("outboxd_slots = %+v (found %v, %v), want a pending backfill", rec, found, err)
	}
	if _, err := b.pool.Exec(t.Context(), `UPDATE outbox SET topic = $1`, b.topic); err != nil { // the operator fixes the rows
		t.Fatal(err)
	}
	// The slot is lost too: a plain start names the unfinished backfill,
	// and --create-slot alone backfills with its recorded predicate.
	b.dropSlot(t)
	err = b.start(cdc.Config{}).wait(time.Minute)
	if !errors.Is(err, slot.ErrMissing) || !strings.Contains(err.Error(), "Its backfill (true) had not finished") || !strings.Contains(err.Error(), `BackfillWhere = "(true) OR created_at >= '`) {
		t.Fatalf("Run with the pending backfill's slot gone = %v, want the refusal naming the unfinished backfill in its command", err)
	}
	r := b.start(cdc.Config{CreateSlot: true})
	c := b.consume()
	c.untilIDs(t, want, 2*time.Minute)
	waitForState(t, r, cdc.StateStreaming)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := slot.ReadRecord(t.Context(), b.pool, b.slot); !rec.BackfillDone || rec.BackfillRows != int64(len(want)) {
		t.Errorf("outboxd_slots after the second start = %+v, want the backfill of %d rows done", rec, len(want))
	}
}

// waitForState polls the streamer's state (streaming comes after the
// backfill was recorded done).
func waitForState(t *testing.T, r *runner, want cdc.State) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for r.st.Stats().State != want {
		if time.Now().After(deadline) {
			t.Fatalf("streamer state %s after a minute, want %s", r.st.Stats().State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertOncePerIDInOrder checks that recs hold each id of want exactly
// once, none of absent, and, per key, ids in increasing order.
func assertOncePerIDInOrder(t *testing.T, recs []*kgo.Record, want, absent []int64) {
	t.Helper()
	seen := map[int64]int{}
	last := map[string]int64{}
	for _, r := range recs {
		id := recordID(t, r)
		seen[id]++
		if prev, ok := last[string(r.Key)]; ok && id <= prev {
			t.Errorf("key %s: id %d after %d", r.Key, id, prev)
		}
		last[string(r.Key)] = id
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("id %d published %d times, want once", id, seen[id])
		}
	}
	for _, id := range absent {
		if seen[id] != 0 {
			t.Errorf("id %d is outside the predicate and was published", id)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct ids published, want %d", len(seen), len(want))
	}
}

// A slot outboxd_slots does not know is adopted on start; one recorded on
// another server (a failover to a standby that has the slot, a restore)
// is logged with both and recorded on this one.
func TestSlotRecordFollowsTheServer(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b := newBed(t, "", nil)
	r := b.start(cdc.Config{})
	waitForState(t, r, cdc.StateStreaming)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	rec, found, err := slot.ReadRecord(t.Context(), b.pool, b.slot)
	if err != nil || !found || rec.CreatedBy != slot.CreatedByAdopted || rec.SystemID == "" || rec.Timeline != 1 {
		t.Fatalf("outboxd_slots = %+v (found %v, %v), want the slot adopted with this server", rec, found, err)
	}
	if err := slot.MoveRecord(t.Context(), b.pool, b.slot, "1", 7); err != nil {
		t.Fatal(err)
	}
	r = b.start(cdc.Config{})
	waitForState(t, r, cdc.StateStreaming)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	moved, _, err := slot.ReadRecord(t.Context(), b.pool, b.slot)
	if err != nil || moved.SystemID != rec.SystemID || moved.Timeline != rec.Timeline || moved.CreatedBy != slot.CreatedByAdopted {
		t.Fatalf("outboxd_slots after a start on this server = %+v, %v; want system %s timeline %d", moved, err, rec.SystemID, rec.Timeline)
	}
}

// A backfill over a missing publication must not find nothing and call it
// done: it is refused before any slot is created.
func TestBackfillRefusesAMissingPublication(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b := newBed(t, "", nil)
	b.dropSlot(t)
	err := b.start(cdc.Config{CreateSlot: true, BackfillWhere: "true", Publication: "misspelled"}).wait(time.Minute)
	if !errors.Is(err, slot.ErrPublicationMissing) {
		t.Fatalf("Run = %v, want ErrPublicationMissing", err)
	}
	if b.slotExists(t) {
		t.Error("a slot was created for a backfill over a missing publication")
	}
	if rec, found, _ := slot.ReadRecord(t.Context(), b.pool, b.slot); found && rec.BackfillDone {
		t.Errorf("outboxd_slots records the backfill as done: %+v", rec)
	}
}

// The backfill publishes what the stream would: a publication's row filter
// applies to it too (here, rows for a topic Kafka does not have, which
// would stop it).
func TestBackfillAppliesThePublicationsRowFilter(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b := newBed(t, "", nil)
	b.dropSlot(t)
	if _, err := b.pool.Exec(t.Context(), `ALTER PUBLICATION outboxd SET TABLE outbox WHERE (topic <> 'filtered_out')`); err != nil {
		t.Fatal(err)
	}
	want, err := b.insert(t.Context(), []row{{agg: uuidFor(1), topic: b.topic, payload: `{}`}, {agg: uuidFor(1), topic: b.topic, payload: `{}`}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.insert(t.Context(), []row{{agg: uuidFor(1), topic: "filtered_out", payload: `{}`}}, true, false); err != nil {
		t.Fatal(err)
	}
	r := b.start(cdc.Config{CreateSlot: true, BackfillWhere: "true"})
	waitForState(t, r, cdc.StateStreaming)
	recs := b.consume().untilIDs(t, want, time.Minute)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if st := r.st.Stats(); st.BackfillTotal != 2 || len(recs) != 2 {
		t.Errorf("backfilled %d rows, consumed %d records; want the 2 the row filter lets through", st.BackfillTotal, len(recs))
	}
}

// A process that finds, between two sessions, a backfill recorded as
// unfinished (its process died) does not wait on it forever: it takes the
// lock and backfills itself.
func TestStandbyTakesOverADeadBackfill(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b := newBed(t, "", nil)
	want, err := b.insert(t.Context(), []row{{agg: uuidFor(1), topic: b.topic, payload: `{}`}, {agg: uuidFor(1), topic: b.topic, payload: `{}`}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b.dropSlot(t) // a slot newer than the rows: the stream alone never publishes them
	if _, err := b.pool.Exec(t.Context(), `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, b.slot); err != nil {
		t.Fatal(err)
	}
	r := b.start(cdc.Config{ReconnectMaxInterval: 200 * time.Millisecond})
	waitForState(t, r, cdc.StateStreaming)
	// Another process's backfill, recorded and never finished.
	if err := slot.SaveRecord(t.Context(), b.pool, slot.Record{Slot: b.slot, SystemID: "x", Timeline: 1, CreatedBy: slot.CreatedByRun, BackfillWhere: "true"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`, b.slot); err != nil {
		t.Fatal(err)
	}
	b.consume().untilIDs(t, want, time.Minute) // the rows predate the slot: only a backfill publishes them
	waitForState(t, r, cdc.StateStreaming)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := slot.ReadRecord(t.Context(), b.pool, b.slot); !rec.BackfillDone || rec.BackfillRows != 2 {
		t.Errorf("outboxd_slots = %+v, want the backfill of 2 rows done", rec)
	}
}
