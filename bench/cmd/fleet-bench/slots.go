package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// walsenders are the server processes streaming the slots now.
func (b *bench) walsenders(ctx context.Context, slots []string) ([]int, error) {
	conn, err := pgx.Connect(ctx, b.DatabaseURL("postgres"))
	if err != nil {
		return nil, fmt.Errorf("looking up the walsenders: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = ANY($1) AND active_pid IS NOT NULL`, slots)
	if err != nil {
		return nil, fmt.Errorf("looking up the walsenders: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("looking up the walsenders: %w", err)
	}
	return pids, nil
}

// released waits until no walsender holds any of the group's slots, so
// that the next group does not find one taken and stand by.
func (b *bench) released(ctx context.Context, g *group) error {
	deadline := time.Now().Add(time.Minute)
	for {
		pids, err := b.walsenders(ctx, g.slots())
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d slots still active a minute after the processes exited", g.name, len(pids))
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// advance moves the pipelines' slots, while no process streams them, to
// the server's current WAL position (pg_replication_slot_advance, on each
// slot's database). The other steps wrote into other databases meanwhile,
// and every walsender decodes the whole server's WAL: without this, each
// would decode and skip that WAL at its start, inside the idle window or
// the load's warm-up. None of the slots' own rows is skipped: the
// processes that streamed them published and confirmed everything before
// they exited.
func (b *bench) advance(ctx context.Context, ps []pipeline) error {
	for _, p := range ps {
		if err := b.Exec(ctx, p.db, fmt.Sprintf(`SELECT pg_replication_slot_advance('%s', pg_current_wal_lsn())`, p.slot)); err != nil {
			return fmt.Errorf("advancing slot %s: %w", p.slot, err)
		}
	}
	return nil
}
