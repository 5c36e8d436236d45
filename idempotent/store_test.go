package idempotent_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/idempotent"
)

// Maintain keeps processed_keys to the TTL by whole days: partitions whose
// day ended more than the TTL ago are dropped, today's and the next days'
// exist, and a key inside the TTL is still a duplicate after a restart.
func TestMaintainDropsExpiredDaysAndKeepsTheRest(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	b := newBed(t, 1)
	ctx := t.Context()
	store := idempotent.NewStore("")
	if err := store.Migrate(ctx, b.pool); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ttl := 7 * 24 * time.Hour
	// The consumer ran on each of the last ten days (with a longer TTL
	// then): those days' partitions exist.
	for d := 10; d >= 1; d-- {
		if _, err := store.Maintain(ctx, b.pool, now.AddDate(0, 0, -d), 30*24*time.Hour, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []struct {
		key  string
		days int
	}{{"old", 9}, {"edge", 8}, {"kept", 6}} {
		if _, err := b.pool.Exec(ctx, `INSERT INTO processed_keys (consumer, key, processed_at) VALUES ('svc', $1, $2)`, k.key, now.AddDate(0, 0, -k.days)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := store.Maintain(ctx, b.pool, now, ttl, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Days 10, 9 and 8 ago ended more than 7 days ago (day 8 ago ended
	// 7 days 10 hours ago); day 7 ago ended 6 days 10 hours ago: kept.
	if want := []string{"processed_keys_p20261122", "processed_keys_p20261123", "processed_keys_p20261124"}; !slices.Equal(m.Dropped, want) {
		t.Errorf("dropped %v, want %v", m.Dropped, want)
	}
	rows, err := b.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'processed_keys'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if names[0] != "processed_keys_p20261125" || names[len(names)-1] != "processed_keys_p20261205" || len(names) != 11 {
		t.Errorf("partitions %v, want 2026-11-25 to 2026-12-05 (today and 3 days ahead)", names)
	}
	var keys []string
	rows, _ = b.pool.Query(ctx, `SELECT key FROM processed_keys ORDER BY key`)
	keys, _ = pgx.CollectRows(rows, pgx.RowTo[string])
	if !slices.Equal(keys, []string{"kept"}) {
		t.Errorf("keys left %v, want [kept]", keys)
	}

	// A key processed inside the TTL is still caught after a restart.
	group := testenv.Name(t, "group")
	b.produce(t, 1, 2)
	r := b.start(t, idempotent.Config{Group: group, Name: "svc2"})
	b.waitRows(t, group, 2)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r.c.Close()
	b.produce(t, 1, 2, 3)
	again := b.start(t, idempotent.Config{Group: testenv.Name(t, "other_group"), Name: "svc2", Handler: insertBusiness(group)})
	b.waitRows(t, group, 3)
	time.Sleep(500 * time.Millisecond)
	if err := again.stop(t); err != nil {
		t.Fatal(err)
	}
	if rows, twice := b.rows(t, group); rows != 3 || twice != 0 {
		t.Errorf("after a restart (and a replay from the start): %d rows, %d twice; want 3 and 0", rows, twice)
	}
}

// Regression (issue 37, review): with a table name of 56 to 63 bytes,
// <table>_sourced was cut to 63 bytes by PostgreSQL (at 63, to the table's
// own name), and the claim then failed on a missing column, stopping Run.
// Migrate refuses such a name before creating anything.
func TestStoreRefusesANameWithoutRoomForItsCompanion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		table string
		ok    bool
	}{
		{strings.Repeat("k", 55), true},
		{"app." + strings.Repeat("k", 55), true},
		{strings.Repeat("k", 56), false},
		{strings.Repeat("k", 63), false},
	} {
		err := idempotent.NewStore(tc.table).Migrate(t.Context(), failingDB{})
		if refused := err != nil && strings.Contains(err.Error(), "at most 55 bytes"); refused == tc.ok {
			t.Errorf("Migrate with table %s (%d bytes): %v, want refused %v", tc.table, len(tc.table), err, !tc.ok)
		}
	}
}

// failingDB fails every statement: Migrate's name check comes first.
type failingDB struct{ idempotent.DB }

func (failingDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("no database here")
}
