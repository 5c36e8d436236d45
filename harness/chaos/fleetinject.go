package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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

// stopReplica kills (kill -9) or stops (SIGTERM) a replica that streams
// pipelines, times their takeover by the others, starts it again after
// o.Down, and waits until it took back the pipelines it is ranked first
// for (hand-overs).
func (in *fleetInjector) stopReplica(ctx context.Context, f Fault) error {
	pl := in.reps.poll(ctx)
	held := map[int][]string{}
	for _, name := range in.active() {
		if on := pl.streaming(name); len(on) == 1 {
			held[on[0]] = append(held[on[0]], name)
		}
	}
	// A replica holding more pipelines is hit more often: more takeovers
	// to time, and a replica with none is no fault.
	var candidates []int
	for r := range held {
		for range held[r] {
			candidates = append(candidates, r)
		}
	}
	if len(candidates) == 0 {
		return errors.New("no replica streams a pipeline")
	}
	slices.Sort(candidates)
	r := candidates[in.rng.IntN(len(candidates))]
	names := held[r]
	at := time.Now()
	in.mark(f, at, names...)
	ff := FleetFault{Fault: f, Seconds: in.seconds(at), Replica: &r, Pipelines: names}
	if f == FaultKill9 {
		in.reps.kill(r)
	} else {
		code, err := in.reps.terminate(r, time.Minute)
		if err != nil || code != 0 {
			in.rep.Problems = append(in.rep.Problems, fmt.Sprintf("SIGTERM of replica %d: exit code %d, %v", r, code, err))
		}
	}
	in.log.Info("replica down", "fault", f, "replica", r, "pipelines", names)
	taken := map[string]time.Time{}
	_, err := in.reps.waitFor(ctx, recoveryTimeout, fmt.Sprintf("replica %d's pipelines streaming on another replica", r), func(pl placement) bool {
		for _, name := range names {
			if _, ok := taken[name]; !ok && len(pl.streaming(name)) == 1 {
				taken[name] = pl.at
			}
		}
		return len(taken) == len(names)
	})
	if err != nil {
		return err
	}
	if f == FaultKill9 {
		tk := FleetTakeover{Replica: r, Seconds: ff.Seconds}
		for _, name := range names {
			ms := ms(taken[name].Sub(at))
			tk.Pipelines = append(tk.Pipelines, PipelineMS{Pipeline: name, MS: ms})
			in.rep.TakeoverMS = append(in.rep.TakeoverMS, ms)
		}
		in.rep.Takeovers = append(in.rep.Takeovers, tk)
	}
	if _, err := in.settle(ctx, fmt.Sprintf("%s of replica %d: taken over", f, r), false); err != nil {
		return err
	}
	ff.RecoveredMS = ms(time.Since(at))
	in.note(ff)
	if !sleep(ctx, in.o.Down) {
		return ctx.Err()
	}
	back := time.Now()
	// The pipelines it is ranked first for come back to it by hand-overs.
	var own []string
	for _, name := range in.active() {
		if preferred(name, len(in.reps.procs)) == r {
			own = append(own, name)
		}
	}
	in.mark(FaultHandover, back, own...)
	if err := in.reps.start(r); err != nil {
		return err
	}
	_, err = in.settle(ctx, fmt.Sprintf("%s of replica %d: back", f, r), true)
	return err
}

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

// killCoordinator kills -9 the broker coordinating a random exactly-once
// pipeline's transactional id, waits for every pipeline to go on without
// it, then starts it again.
func (in *fleetInjector) killCoordinator(ctx context.Context) error {
	var eos []*fleetPipeline
	for _, p := range in.bed.pipelines {
		if p.exactlyOnce {
			eos = append(eos, p)
		}
	}
	if len(eos) == 0 || in.bed.kafka == nil || in.bed.kafka.cluster == nil {
		return errors.New("no exactly-once pipeline, or no three-broker cluster")
	}
	p := eos[in.rng.IntN(len(eos))]
	coords, err := txnCoordinators(ctx, in.bed.brokers, eos)
	if err != nil {
		return err
	}
	id := coords[p.txnID]
	var coordinated []string
	for _, q := range eos {
		if coords[q.txnID] == id {
			coordinated = append(coordinated, q.name)
		}
	}
	node := in.bed.kafka.cluster.Node(id)
	at := time.Now()
	in.mark(FaultCoordinatorKill, at, in.active()...)
	if err := node.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	in.log.Info("transaction coordinator killed", "node", id, "of", p.name, "coordinates", coordinated)
	// Recovered once another broker coordinates the transactional id and
	// every pipeline published what was written after that.
	var moved int32
	deadline := time.Now().Add(recoveryTimeout)
	for moved == 0 || moved == id {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's transactional id still coordinated by the dead node %d after %s", p.name, id, recoveryTimeout)
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
		if coords, err := txnCoordinators(ctx, in.bed.brokers, []*fleetPipeline{p}); err == nil {
			moved = coords[p.txnID]
		}
	}
	if _, err := in.settle(ctx, fmt.Sprintf("coordinator_kill9 of node %d: without it", id), true); err != nil {
		return err
	}
	recovered := ms(time.Since(at))
	in.sleepBetween(ctx, time.Second, 3*time.Second)
	if err := node.Start(ctx); err != nil {
		return err
	}
	if _, err := in.settle(ctx, fmt.Sprintf("coordinator_kill9 of node %d: back", id), true); err != nil {
		return err
	}
	in.note(FleetFault{Fault: FaultCoordinatorKill, Seconds: in.seconds(at), Node: id, Pipelines: in.active(), RecoveredMS: recovered,
		Note: fmt.Sprintf("node %d coordinated %s (%s's transactional id); node %d took over %s's", id, strings.Join(coordinated, ", "), p.name, moved, p.name)})
	return nil
}

// txnCoordinators finds the broker coordinating each pipeline's
// transactional id.
func txnCoordinators(ctx context.Context, brokers []string, ps []*fleetPipeline) (map[string]int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ids := make([]string, 0, len(ps))
	for _, p := range ps {
		ids = append(ids, p.txnID)
	}
	resp := kadm.NewClient(cl).FindTxnCoordinators(ctx, ids...)
	if err := resp.Error(); err != nil {
		return nil, fmt.Errorf("finding the transaction coordinators: %w", err)
	}
	out := map[string]int32{}
	for id, r := range resp {
		out[id] = r.NodeID
	}
	return out, nil
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
