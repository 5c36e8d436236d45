package main

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/procstat"
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

// cpuReading is one probe reading.
type cpuReading struct {
	publisher float64
	sleeps    int64           // the publisher's voluntary context switches (procstat.Sleeps)
	server    map[int]float64 // pid -> CPU seconds
	machine   cpuSample
}

func (p cpuProbe) read(ctx context.Context, e *env) cpuReading {
	r := cpuReading{server: map[int]float64{}}
	r.publisher, _ = procstat.CPUSeconds(p.pid)
	r.sleeps, _ = procstat.Sleeps(p.pid)
	for _, pid := range p.serverPids(ctx, e) {
		if cpu, err := procstat.CPUSeconds(pid); err == nil {
			r.server[pid] = cpu
		}
	}
	r.machine, _ = machineCPU()
	return r
}

func (p cpuProbe) serverPids(ctx context.Context, e *env) []int {
	conn, err := pgx.Connect(ctx, e.dbURL(p.db))
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

// cpuUsed is what a system used between two readings: its own process,
// the server processes working for it (a process that appeared meanwhile
// counts whole), and how busy the machine was (share of all cores).
func cpuUsed(a, b cpuReading) (publisher, server, machineBusy float64) {
	publisher = b.publisher - a.publisher
	for pid, cpu := range b.server {
		server += cpu - a.server[pid]
	}
	if b.machine.total > a.machine.total {
		machineBusy = float64(b.machine.busy-a.machine.busy) / float64(b.machine.total-a.machine.total)
	}
	return publisher, server, machineBusy
}
