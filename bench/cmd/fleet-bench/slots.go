package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// queryRow runs a query of one row on the server's postgres database
// and scans it into dest.
func (b *bench) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	conn, err := pgx.Connect(ctx, b.DatabaseURL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, query, args...).Scan(dest...)
}

// walsenders are the server processes streaming the slots now.
func (b *bench) walsenders(ctx context.Context, slots []string) ([]int, error) {
	var pids []int
	err := b.queryRow(ctx, `SELECT coalesce(array_agg(active_pid), '{}') FROM pg_replication_slots WHERE slot_name = ANY($1) AND active_pid IS NOT NULL`, []any{slots}, &pids)
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
// processes that streamed them confirmed everything before they exited
// (outboxd once published, slot-reader once received).
func (b *bench) advance(ctx context.Context, ps []pipeline) error {
	for _, p := range ps {
		if err := b.Exec(ctx, p.db, fmt.Sprintf(`SELECT pg_replication_slot_advance('%s', pg_current_wal_lsn())`, p.slot)); err != nil {
			return fmt.Errorf("advancing slot %s: %w", p.slot, err)
		}
	}
	return nil
}

// walPosition is the server's current WAL position, in bytes.
func (b *bench) walPosition(ctx context.Context) (int64, error) {
	var lsn int64
	if err := b.queryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`, nil, &lsn); err != nil {
		return 0, fmt.Errorf("reading the WAL position: %w", err)
	}
	return lsn, nil
}

// restartBacklog is the most WAL any of the slots holds between the
// position its decoding restarts from and the one it confirmed: what a
// walsender decodes again, sending nothing, before it streams anew.
func (b *bench) restartBacklog(ctx context.Context, slots []string) (int64, error) {
	var n int64
	err := b.queryRow(ctx, `SELECT coalesce(max(confirmed_flush_lsn - restart_lsn), 0)::bigint FROM pg_replication_slots WHERE slot_name = ANY($1)`, []any{slots}, &n)
	if err != nil {
		return 0, fmt.Errorf("reading the slots' restart positions: %w", err)
	}
	return n, nil
}

// caughtUp waits until every walsender streaming g's slots has decoded
// past a marker written now (a transactional logical decoding message on
// the postgres database, which no pipeline publishes), and returns when it
// saw that. A pipeline streams from the moment replication starts, but
// its walsender first decodes again, sending nothing, the WAL between
// the slot's restart position and the one it confirmed.
func (b *bench) caughtUp(ctx context.Context, g *group) (time.Time, error) {
	var marker int64
	if err := b.queryRow(ctx, `SELECT pg_logical_emit_message(true, 'fleet-bench', '') - '0/0'::pg_lsn`, nil, &marker); err != nil {
		return time.Time{}, fmt.Errorf("writing the catch-up marker: %w", err)
	}
	deadline := time.Now().Add(streamLimit)
	for {
		var behind int
		err := b.queryRow(ctx, `SELECT count(*) FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
			WHERE s.slot_name = ANY($1) AND (r.sent_lsn IS NULL OR r.sent_lsn - '0/0'::pg_lsn < $2)`, []any{g.slots(), marker}, &behind)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s: reading the walsenders' positions: %w", g.name, err)
		}
		if behind == 0 {
			return time.Now(), nil
		}
		if err := g.exited(); err != nil {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: %d walsenders not caught up %s after every pipeline streamed", g.name, behind, streamLimit)
		}
		if err := sleep(ctx, pollEvery); err != nil {
			return time.Time{}, err
		}
	}
}
