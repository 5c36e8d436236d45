package chaos

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/slot"
)

// failoverMargin is how far before the recorded acknowledged commit time
// the recovery's predicate starts. It must exceed the longest transaction
// (a row's created_at is its transaction's start): the writers' take
// milliseconds. outboxd's own suggestion uses 5 minutes, which here would
// re-send most of the run at every failover.
const failoverMargin = 2 * time.Second

// failover replaces the primary with a promoted standby at the same
// address, as an operator's failover (or a floating address) would, while
// the writers write and outboxd streams:
//
//  1. a standby is made of the primary (pg_basebackup: without the slot)
//     and made synchronous, so that every commit a writer saw succeed is
//     on it;
//  2. the primary dies (immediate shutdown), the standby is promoted (a
//     new timeline) and restarted on the primary's port;
//  3. the active publisher must stop (exit 1) saying the slot is gone;
//  4. the recovery: a publisher started with --create-slot and
//     --backfill-where "created_at >= <acknowledged commit time in
//     outboxd_slots - failoverMargin>", as the refusal suggests.
//
// On PostgreSQL 17+ the slot is a failover slot (migrate's default) and
// the standby synchronizes it, with synchronized_standby_slots set on the
// primary: the failover waits until the standby's copy is synchronized
// and persistent, and then the active publisher must go on streaming from
// the promoted standby, with no recovery (3 and 4 do not apply).
func (in *injector) failover(ctx context.Context) error {
	if err := in.waitStreaming(ctx, in.active); err != nil {
		return err
	}
	var version int
	if err := queryRow(ctx, in.pg.URL, `SELECT current_setting('server_version_num')::int`, nil, &version); err != nil {
		return err
	}
	failoverSlot := version >= slot.FailoverVersion
	standby, err := in.pg.StartStandby(ctx)
	if err != nil {
		return err
	}
	promoted := false
	defer func() {
		if !promoted {
			_ = standby.Remove(context.WithoutCancel(ctx))
		}
	}()
	if err := execSQL(ctx, in.pg.URL, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
		return err
	}
	if err := execSQL(ctx, in.pg.URL, `SELECT pg_reload_conf()`); err != nil {
		return err
	}
	if err := in.until(ctx, time.Minute, "the standby synchronous", `SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync'`); err != nil {
		return err
	}
	// Everything before now, outboxd_slots' acknowledged commit time
	// included, reaches the standby; every commit after waits for it.
	var lsn string
	if err := queryRow(ctx, in.pg.URL, `SELECT pg_current_wal_lsn()::text`, nil, &lsn); err != nil {
		return err
	}
	if err := in.until(ctx, time.Minute, "the standby caught up", `SELECT count(*) > 0 FROM pg_stat_replication WHERE flush_lsn >= $1::pg_lsn`, lsn); err != nil {
		return err
	}
	if failoverSlot {
		if err := in.syncSlotTo(ctx, standby); err != nil {
			return err
		}
	}

	u, err := url.Parse(in.pg.URL)
	if err != nil {
		return err
	}
	oldDir := in.pg.Dir
	in.ledger.failover.Store(true)
	died := time.Now()
	if err := in.pg.Stop(ctx, "immediate"); err != nil {
		return err
	}
	if err := standby.Promote(ctx); err != nil {
		return err
	}
	if err := standby.MoveTo(ctx, u.Port()); err != nil {
		return err
	}
	promoted = true
	in.pg.Dir = standby.Dir // the same URL: the run's cleanup now removes the new primary
	in.ledger.failover.Store(false)
	if err := os.RemoveAll(oldDir); err != nil {
		return err
	}
	if failoverSlot {
		// The same process reconnects to the promoted standby and goes on.
		if err := in.waitStreaming(ctx, in.active); err != nil {
			in.problems = append(in.problems, fmt.Sprintf("failover with a failover slot: %v", err))
			return err
		}
		ms := float64(time.Since(died).Microseconds()) / 1000
		in.failovers = append(in.failovers, ms)
		in.backfilled = append(in.backfilled, 0)
		in.log.Info("failover: streaming on from the synchronized slot", "ms", ms)
		return nil
	}

	select {
	case <-in.active.done:
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("%s still runs 2 minutes after its slot vanished in a failover; log tail:\n%s", in.active.name, in.active.tail())
	}
	if _, code := in.active.exited(); code != 1 || !strings.Contains(in.active.tail(), "is gone") {
		in.problems = append(in.problems, fmt.Sprintf("failover: %s exited with code %d, want 1 with the slot reported gone; log tail:\n%s", in.active.name, code, in.active.tail()))
	}
	var acked time.Time
	if err := queryRow(ctx, in.pg.URL, `SELECT acknowledged_commit_time FROM outboxd_slots WHERE slot_name = $1`, []any{slotName}, &acked); err != nil {
		return fmt.Errorf("reading outboxd_slots on the promoted standby: %w", err)
	}
	pred := fmt.Sprintf("created_at >= '%s'", acked.Add(-failoverMargin).UTC().Format(time.RFC3339Nano))
	p, err := in.publishers.start("--create-slot", "--backfill-where", pred)
	if err != nil {
		return err
	}
	in.active = p
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err = p.waitLog(wctx, "backfill acknowledged")
	cancel()
	if err != nil {
		return err
	}
	var rows int64
	if err := queryRow(ctx, in.pg.URL, `SELECT backfill_rows FROM outboxd_slots WHERE slot_name = $1`, []any{slotName}, &rows); err != nil {
		return err
	}
	ms := float64(time.Since(died).Microseconds()) / 1000
	in.failovers = append(in.failovers, ms)
	in.backfilled = append(in.backfilled, rows)
	in.log.Info("failover recovered", "ms", ms, "backfill_where", pred, "backfilled_rows", rows)
	return nil
}

// syncSlotTo makes the primary hold logical walsenders of failover slots
// back until standby has the WAL (synchronized_standby_slots), and waits
// until standby's copy of the slot is synchronized, persistent (a copy
// stays temporary, and is dropped at promotion, until the primary's slot
// has moved past what the standby holds) and caught up with the primary's.
func (in *injector) syncSlotTo(ctx context.Context, standby *testbed.Postgres) error {
	physical, err := os.ReadFile(filepath.Join(standby.Dir, "primary_slot"))
	if err != nil {
		return err
	}
	if err := execSQL(ctx, in.pg.URL, `ALTER SYSTEM SET synchronized_standby_slots = '`+strings.TrimSpace(string(physical))+`'`); err != nil {
		return err
	}
	if err := execSQL(ctx, in.pg.URL, `SELECT pg_reload_conf()`); err != nil {
		return err
	}
	// The copy must also have caught up with where the primary's slot is
	// now: the duplicates of the failover are then what the copy trails
	// by when the primary dies, the bound's slot sync lag.
	var confirmed string
	if err := queryRow(ctx, in.pg.URL, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, []any{slotName}, &confirmed); err != nil {
		return err
	}
	return until(ctx, standby.URL, 2*time.Minute, fmt.Sprintf("the standby's copy of slot %s synchronized, persistent and at %s", slotName, confirmed),
		`SELECT synced AND NOT temporary AND confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, slotName, confirmed)
}

// until polls a boolean query (up to d) until it is true.
func (in *injector) until(ctx context.Context, d time.Duration, what, sql string, args ...any) error {
	return until(ctx, in.pg.URL, d, what, sql, args...)
}

// until polls a boolean query on the server at url (up to d) until it is true.
func until(ctx context.Context, url string, d time.Duration, what, sql string, args ...any) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var ok bool
		if err := queryRow(ctx, url, sql, args, &ok); err == nil && ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("waiting for %s: not within %s", what, d)
}
