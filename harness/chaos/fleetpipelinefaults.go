package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// terminateWalsender ends one active pipeline's walsender.
func (in *fleetInjector) terminateWalsender(ctx context.Context) error {
	names := in.active()
	p := in.pipeline(names[in.rng.IntN(len(names))])
	at := time.Now()
	in.mark(FaultWalsender, at, p.name)
	deadline := at.Add(30 * time.Second)
	for {
		var n int
		err := queryRow(ctx, in.bed.adminURL, `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, []any{p.slot}, &n)
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no walsender on slot %s to terminate within 30 s (err %v)", p.slot, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := in.settle(ctx, "walsender_terminate of "+p.name, true); err != nil {
		return err
	}
	in.note(FleetFault{Fault: FaultWalsender, Seconds: in.seconds(at), Pipelines: []string{p.name}, RecoveredMS: ms(time.Since(at))})
	return nil
}

// databaseUnreachable makes one active pipeline's database refuse every
// connection (its sessions terminated) for o.Down, then lets them in.
func (in *fleetInjector) databaseUnreachable(ctx context.Context) error {
	names := in.active()
	p := in.pipeline(names[in.rng.IntN(len(names))])
	db := pgx.Identifier{p.db}.Sanitize()
	at := time.Now()
	in.mark(FaultDatabaseUnreachable, at, p.name)
	if err := execSQL(ctx, in.bed.adminURL, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false"); err != nil {
		return err
	}
	if err := execSQL(ctx, in.bed.adminURL, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, p.db); err != nil {
		return err
	}
	// It must stop streaming, on every replica, while its database is
	// out of reach; the others stream on.
	pl, err := in.reps.waitFor(ctx, 30*time.Second, p.name+" not streaming while its database refuses connections", func(pl placement) bool {
		return len(pl.streaming(p.name)) == 0
	})
	if err != nil {
		return err
	}
	if !sleep(ctx, in.o.Down) {
		return ctx.Err()
	}
	pl = in.reps.poll(ctx)
	note := fmt.Sprintf("%s's states while out of reach: %v", p.name, pl.states[p.name])
	back := time.Now()
	if err := execSQL(ctx, in.bed.adminURL, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true"); err != nil {
		return err
	}
	if _, err := in.settle(ctx, "database_unreachable of "+p.name, true); err != nil {
		return err
	}
	in.note(FleetFault{Fault: FaultDatabaseUnreachable, Seconds: in.seconds(at), Pipelines: []string{p.name}, RecoveredMS: ms(time.Since(back)), Note: note})
	return nil
}

// poison commits a row larger than the poisoned pipeline's
// --max-record-bytes, alone in its transaction, with that pipeline's
// writers held, so that every other commit of it is before or after; the
// pipeline must then back off, and the others stream on.
func (in *fleetInjector) poison(ctx context.Context) error {
	var p *fleetPipeline
	for _, q := range in.bed.pipelines {
		if q.maxRecordBytes > 0 {
			p = q
		}
	}
	if p == nil {
		return errors.New("no pipeline was set up to be poisoned")
	}
	payload := fmt.Sprintf(`{"agg": "poison", "seq": 0, "pad": "%s"}`, strings.Repeat("x", 2*p.maxRecordBytes))
	p.hold.Lock()
	p.ledger.mu.Lock()
	p.boundary = len(p.ledger.committed)
	p.ledger.mu.Unlock()
	at := time.Now()
	var id int64
	err := queryRow(ctx, p.url, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('ffffffff-ffff-4fff-bfff-ffffffffffff', $1, $2::jsonb) RETURNING id`,
		[]any{p.topic, payload}, &id)
	in.othersBefore = map[string]int{}
	for _, q := range in.bed.pipelines {
		q.ledger.mu.Lock()
		in.othersBefore[q.name] = len(q.ledger.committed)
		q.ledger.mu.Unlock()
	}
	p.hold.Unlock()
	if err != nil {
		return fmt.Errorf("inserting the poison row into %s: %w", p.db, err)
	}
	p.poisonID = id
	in.mark(FaultPoisonRow, at, p.name)
	in.rep.Poison = &PoisonReport{Pipeline: p.name, ID: id, PayloadBytes: len(payload), MaxRecordBytes: p.maxRecordBytes}
	pl, err := in.reps.waitFor(ctx, time.Minute, p.name+" backing off at the poison row", func(pl placement) bool { return pl.in(p.name, "backing off") })
	if err != nil {
		return err
	}
	in.rep.Poison.BackingOffAfterMS = ms(pl.at.Sub(at))
	in.rep.Poison.BackingOffDetail = pl.details[p.name]["backing off"]
	if _, err := in.settle(ctx, "poison_row in "+p.name, true); err != nil {
		return err
	}
	in.note(FleetFault{Fault: FaultPoisonRow, Seconds: in.seconds(at), Pipelines: []string{p.name}, Note: fmt.Sprintf("outbox id %d, %d bytes", id, len(payload))})
	return nil
}
