package main

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/bench/internal/host"
)

// relayAppName marks the relay's database sessions, so that the CPU of the
// server backends it keeps busy can be charged to it.
const relayAppName = "outboxd_bench_relay"

// cpuProbe reads, at one moment, the CPU seconds a system has used so far:
// its own process (outboxd, the relay, Debezium's JVM) and the PostgreSQL
// processes that work for it (the slot's walsender for the log-based
// systems; the relay's backends, which run its SELECT ... FOR UPDATE and
// UPDATE, for the relay). Processes are read from /proc.
type cpuProbe struct {
	pid  int    // the publisher's process
	db   string // its database
	slot string // the slot whose walsender works for it ("" for the relay)
}

// read reads the system's CPU time now (host.Read): its process and the
// server processes working for it.
func (p cpuProbe) read(ctx context.Context, e *env) host.Reading {
	return host.Read([]int{p.pid}, p.serverPids(ctx, e))
}

func (p cpuProbe) serverPids(ctx context.Context, e *env) []int {
	conn, err := pgx.Connect(ctx, e.DatabaseURL(p.db))
	if err != nil {
		return nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	q, arg := `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, p.slot
	if p.slot == "" {
		q, arg = `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, relayAppName
	}
	rows, err := conn.Query(ctx, q, arg)
	if err != nil {
		return nil
	}
	pids, _ := pgx.CollectRows(rows, pgx.RowTo[int])
	return pids
}
