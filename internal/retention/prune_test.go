package retention_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/internal/retention"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/slot"
)

// Regression test for a review finding: on a plain table whose primary
// key had several columns, the batched delete joined on the first one
// alone and deleted new rows sharing it with an old one.
func TestPruneCompositeKeyKeepsNewRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testenv.Database(t)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := conn.Exec(ctx, `CREATE TABLE app_outbox (tenant integer, seq bigint, created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (tenant, seq))`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, conn, migrations.Target{Table: "public.app_outbox", Publication: "p", OwnTable: true}, log); err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t, "slot")
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, name) })
	if err := slot.SaveRecord(ctx, conn, slot.Record{Slot: name, SystemID: "1", Timeline: 1, CreatedBy: slot.CreatedByMigrate}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE outboxd_slots SET acknowledged_commit_time = now() WHERE slot_name = $1`, name); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO app_outbox VALUES (1, 1, now() - interval '30 days'), (1, 2, now()), (2, 3, now() - interval '30 days')`); err != nil {
		t.Fatal(err)
	}
	res, err := retention.Prune(ctx, conn, retention.Config{Table: "public.app_outbox", Slot: name, OlderThan: 7 * 24 * time.Hour, RecoveryMargin: time.Minute}, time.Now(), log)
	if err != nil || res.Deleted != 2 {
		t.Fatalf("Prune = %+v, %v; want 2 rows deleted", res, err)
	}
	var left []int64
	rows, _ := conn.Query(ctx, `SELECT seq FROM app_outbox ORDER BY seq`)
	left, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(left) != 1 || left[0] != 2 {
		t.Fatalf("rows left %v (%v), want only the new one, seq 2", left, err)
	}
}
