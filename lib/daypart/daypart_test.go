package daypart_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/lib/daypart"
)

// TestDropIsSafeToRepeat: a concurrent detach whose second phase timed
// out leaves the partition pending detach; Drop finishes it (a plain
// DETACH again would fail for ever: regression test for a review finding
// on prune). A partition detached already is only dropped.
func TestDropIsSafeToRepeat(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testenv.Database(t)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	table := pgx.Identifier{"public", "events"}
	if _, err := conn.Exec(ctx, `CREATE TABLE events (id bigint, at timestamptz NOT NULL) PARTITION BY RANGE (at)`); err != nil {
		t.Fatal(err)
	}
	day := daypart.Day(time.Now()).AddDate(0, 0, -10)
	for d := range 2 {
		if _, err := daypart.Create(ctx, conn, table, day.AddDate(0, 0, d)); err != nil {
			t.Fatal(err)
		}
	}
	parts, err := daypart.List(ctx, conn, table)
	if err != nil || len(parts) != 2 {
		t.Fatalf("List = %v, %v; want two partitions", parts, err)
	}

	// A transaction that uses the first partition holds up the second
	// phase of its concurrent detach past the lock timeout.
	holder, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO events VALUES (1, $1)`, day.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET lock_timeout = '300ms'`); err != nil {
		t.Fatal(err)
	}
	if err := daypart.Drop(ctx, conn, table, parts[0], true); err == nil {
		t.Fatal("Drop succeeded while a transaction held the partition: the test set-up is wrong")
	}
	var pending bool
	if err := conn.QueryRow(ctx, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = $1::regclass`, parts[0].Name).Scan(&pending); err != nil || !pending {
		t.Fatalf("partition pending detach: %v (%v), want true", pending, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := daypart.Drop(ctx, conn, table, parts[0], true); err != nil {
		t.Fatalf("Drop of a partition pending detach: %v", err)
	}

	// Detached by hand, then dropped.
	if _, err := conn.Exec(ctx, `ALTER TABLE events DETACH PARTITION `+parts[1].Name); err != nil {
		t.Fatal(err)
	}
	if err := daypart.Drop(ctx, conn, table, parts[1], false); err != nil {
		t.Fatalf("Drop of a detached partition: %v", err)
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'events_p%'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d partition tables left (%v), want none", left, err)
	}
}
