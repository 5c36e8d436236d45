package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// recoveryTimeout bounds each wait for the fleet to recover from a fault.
const recoveryTimeout = 2 * time.Minute

// fleetInjector injects a fleet run's faults, one at a time, and waits
// for the fleet to recover from each before the next.
type fleetInjector struct {
	o     FleetOptions
	bed   *fleetBed
	reps  *replicaSet
	rng   *rand.Rand
	start time.Time
	log   *slog.Logger
	rep   *FleetReport
	// othersBefore is how many events each other pipeline had committed
	// when the poison row was.
	othersBefore map[string]int
}

// active is every pipeline but the poisoned one (stopped at its poison
// row for good), by name.
func (in *fleetInjector) active() []string {
	var out []string
	for _, p := range in.bed.pipelines {
		if p.poisonID == 0 {
			out = append(out, p.name)
		}
	}
	return out
}

func (in *fleetInjector) pipeline(name string) *fleetPipeline {
	for _, p := range in.bed.pipelines {
		if p.name == name {
			return p
		}
	}
	return nil
}

// mark notes that f hit the named pipelines at t (their duplicates after
// it are f's). The poisoned pipeline takes no mark after its poison row:
// its restarts at it are the poison's.
func (in *fleetInjector) mark(f Fault, t time.Time, names ...string) {
	for _, name := range names {
		if p := in.pipeline(name); p.poisonID == 0 || f == FaultPoisonRow {
			p.marks = append(p.marks, Mark{Fault: f, At: t})
		}
	}
}

func (in *fleetInjector) note(f FleetFault) {
	in.rep.Faults = append(in.rep.Faults, f)
	in.rep.FaultsInjected[f.Fault]++
}

func (in *fleetInjector) seconds(t time.Time) float64 { return t.Sub(in.start).Seconds() }

func (in *fleetInjector) inject(ctx context.Context, f Fault) error {
	switch f {
	case FaultKill9, FaultSIGTERM:
		return in.stopReplica(ctx, f)
	case FaultWalsender:
		return in.terminateWalsender(ctx)
	case FaultDatabaseUnreachable:
		return in.databaseUnreachable(ctx)
	case FaultPoisonRow:
		return in.poison(ctx)
	case FaultCoordinatorKill:
		return in.killCoordinator(ctx)
	}
	return fmt.Errorf("unknown fleet fault %q", f)
}

// settle waits until every active pipeline streams on the replica ranked
// first for it (onPreferred) or on one replica, the other replicas stand
// by for it, and every active pipeline published what was written after
// the call (see confirmed); it records the spread after.
func (in *fleetInjector) settle(ctx context.Context, after string, onPreferred bool) (placement, error) {
	names := in.active()
	written := in.written()
	pl, err := in.reps.waitFor(ctx, recoveryTimeout, "every pipeline streaming on "+map[bool]string{true: "its preferred replica", false: "a replica"}[onPreferred]+" and standing by on the others",
		func(pl placement) bool { return pl.settled(names, onPreferred) && pl.standingBy(names) })
	if err != nil {
		return pl, err
	}
	if err := in.confirmed(ctx, written); err != nil {
		return pl, err
	}
	in.rep.Spread = append(in.rep.Spread, pl.spread(after, in.start))
	return pl, nil
}

// written is how many events each active pipeline's writers committed.
func (in *fleetInjector) written() map[string]int64 {
	out := map[string]int64{}
	for _, name := range in.active() {
		out[name] = in.pipeline(name).ledger.events.Load()
	}
	return out
}

// confirmed waits (up to recoveryTimeout) until each active pipeline's
// writers committed more than since says, and then until every active
// slot confirmed the WAL position of that moment: each pipeline then
// published (and, exactly-once, committed to Kafka) a transaction of
// after since, and what a fault made it send again is in Kafka, before
// the next fault.
func (in *fleetInjector) confirmed(ctx context.Context, since map[string]int64) error {
	deadline := time.Now().Add(recoveryTimeout)
	var slots []string
	for _, name := range in.active() {
		p := in.pipeline(name)
		for p.ledger.events.Load() <= since[name] {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s's writers committed nothing within %s", name, recoveryTimeout)
			}
			if !sleep(ctx, 20*time.Millisecond) {
				return ctx.Err()
			}
		}
		slots = append(slots, p.slot)
	}
	return slotsConfirmed(ctx, in.bed.adminURL, slots, time.Until(deadline))
}

// slotsConfirmed waits (up to d) until each slot confirmed the WAL
// position of when it was called.
func slotsConfirmed(ctx context.Context, admin string, slots []string, d time.Duration) error {
	var target string
	if err := queryRow(ctx, admin, `SELECT pg_current_wal_lsn()::text`, nil, &target); err != nil {
		return fmt.Errorf("reading the WAL position: %w", err)
	}
	want, _ := pglogrepl.ParseLSN(target)
	deadline := time.Now().Add(d)
	var behind []string
	for {
		conn, err := connect(ctx, admin)
		if err == nil {
			behind, err = slotsBehind(ctx, conn, slots, want)
			conn.Close(context.WithoutCancel(ctx))
			if err == nil && len(behind) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slots not confirmed to %s within %s: %s (err %v)", target, d, strings.Join(behind, ", "), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// slotsBehind lists the slots (with their position) not confirmed to want.
func slotsBehind(ctx context.Context, conn *pgx.Conn, slots []string, want pglogrepl.LSN) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT slot_name, coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = ANY($1)`, slots)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	seen := map[string]bool{}
	var behind []string
	for rows.Next() {
		var name, lsn string
		if err := rows.Scan(&name, &lsn); err != nil {
			return nil, err
		}
		seen[name] = true
		if l, _ := pglogrepl.ParseLSN(lsn); l < want {
			behind = append(behind, name+" at "+lsn)
		}
	}
	for _, s := range slots {
		if !seen[s] {
			behind = append(behind, s+" missing")
		}
	}
	return behind, rows.Err()
}

func (in *fleetInjector) sleepBetween(ctx context.Context, lo, hi time.Duration) {
	sleep(ctx, lo+time.Duration(in.rng.Int64N(int64(hi-lo))))
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
