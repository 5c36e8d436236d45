package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/outbox"
)

// CreatePolicy says when a Provisioner creates a missing slot.
type CreatePolicy string

// Create policies.
const (
	// CreateNever refuses a missing slot with LostError (run without
	// --create-slot): a slot created now would start at the current
	// position, and what was committed while there was none would be in
	// no slot.
	CreateNever CreatePolicy = "never"
	// CreateOnFreshInstall creates a missing slot only on a fresh install
	// (migrate): never where outboxd_slots records that it existed
	// (LostError), and never over an outbox table (ProvisionConfig.Table) that
	// holds rows in the new slot's snapshot, rows it would never publish.
	// The slot is recorded as created by migrate.
	CreateOnFreshInstall CreatePolicy = "fresh-install"
	// CreateMissing creates a missing or lost slot (run --create-slot),
	// with the backfill of ProvisionConfig.BackfillWhere. The slot is recorded as
	// created by run --create-slot.
	CreateMissing CreatePolicy = "missing"
)

// ProvisionConfig configures a Provisioner. Zero fields take the defaults noted.
type ProvisionConfig struct {
	// DatabaseURL reaches the database; the replication connections the
	// provisioner opens (identifying the server, creating a slot with a
	// snapshot) are derived from it. Required.
	DatabaseURL string
	// PrimaryURL reaches the primary when DatabaseURL reaches a standby
	// (decoding on a standby, PostgreSQL 16+): outboxd_slots is read and
	// written there, and a slot created on the standby asks it for the
	// running-transactions record the creation waits for. The standby is
	// checked first (CheckStandby). Default "": a standby is refused
	// (NoPrimaryError). Unused while DatabaseURL reaches a primary.
	PrimaryURL string
	// Slot is the slot's name. Required.
	Slot string
	// Failover chooses whether a slot created here is a failover slot,
	// and whether an existing one is made one. Default FailoverAuto.
	Failover FailoverMode
	// Create says when a missing slot is created. Default CreateNever.
	Create CreatePolicy
	// Table is the outbox table (SQL syntax) that must hold no row for
	// CreateOnFreshInstall to create the slot; required with it.
	Table string
	// BackfillWhere, with CreateMissing, makes a slot created here come
	// with a backfill of the rows matching it (Backfill, required).
	BackfillWhere string
	// Backfill runs a backfill: BackfillWhere's, or one recorded in
	// outboxd_slots as unfinished, which is run again whole from a new
	// slot. Nil: an unfinished backfill recorded there is left to a
	// provisioner that has one (migrate leaves it to run).
	Backfill Backfiller
	// Names renders the settings the provisioner's messages name (by this
	// Config's field names) as its user set them; the zero Names shows
	// the field names.
	Names field.Names
	// Precheck, when set, runs under the lock before anything is read or
	// created: the caller's conditions for a slot (run: the publication
	// and the outbox table).
	Precheck func(ctx context.Context, conn *pgx.Conn) error
	// RecordRequired makes a failure to record the slot in outboxd_slots
	// an error; otherwise it is logged (a lost slot is then not
	// recognized as lost, but streaming goes on). A backfill always needs
	// its record.
	RecordRequired bool
}

func (c ProvisionConfig) withDefaults() ProvisionConfig {
	if c.Failover == "" {
		c.Failover = FailoverAuto
	}
	if c.Create == "" {
		c.Create = CreateNever
	}
	return c
}

// Validate reports every problem of the configuration at once.
func (c ProvisionConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(name, problem string) { errs = append(errs, &field.Error{Field: name, Problem: problem}) }
	if c.DatabaseURL == "" {
		bad("DatabaseURL", "required")
	}
	if err := ValidName(c.Slot); err != nil {
		bad("Slot", err.Error())
	}
	if _, err := ParseFailoverMode(string(c.Failover)); err != nil {
		bad("Failover", err.Error())
	}
	switch c.Create {
	case CreateNever, CreateMissing:
	case CreateOnFreshInstall:
		if c.Table == "" {
			bad("Table", "creating the slot on a fresh install needs the outbox table, to check that it holds no row")
		}
		if c.Backfill != nil {
			bad("Backfill", "a fresh install has nothing to backfill (a Backfiller goes with CreateMissing or CreateNever)")
		}
	default:
		bad("Create", fmt.Sprintf("%q: want %s, %s or %s", c.Create, CreateNever, CreateOnFreshInstall, CreateMissing))
	}
	if c.Table != "" {
		if _, err := sqlquote.ParseQualified(c.Table); err != nil {
			bad("Table", err.Error())
		}
	}
	if c.BackfillWhere != "" {
		if c.Create != CreateMissing {
			bad("BackfillWhere", "a backfill goes with creating the slot (CreateMissing)")
		}
		if c.Backfill == nil {
			bad("Backfill", "a backfill predicate needs a Backfiller")
		}
		if err := CheckBackfillWhere(c.BackfillWhere); err != nil {
			bad("BackfillWhere", err.Error())
		}
	}
	return errors.Join(errs...)
}

// Backfiller is what the provisioner needs of a backfill. The provisioner
// decides when one runs and keeps outboxd_slots' record of it; the
// Backfiller reads the rows and gets them published (package cdc: through
// the pump, so that the stream after it continues at the slot's
// consistent point).
type Backfiller interface {
	// Check refuses a backfill that cannot be done, before anything is
	// dropped, created or recorded for it.
	Check(ctx context.Context, conn *pgx.Conn) error
	// Read hands on for publishing every row matching snap.Where as tx,
	// the new slot's exported snapshot (read-only), sees it, and returns
	// how many.
	Read(ctx context.Context, tx pgx.Tx, snap Snapshot) (rows int64, err error)
	// Wait returns once every row Read handed on was published
	// (acknowledged by Kafka): the backfill is then recorded as done.
	Wait(ctx context.Context, consistentPoint outbox.LSN) error
}

// Snapshot is what a Backfiller's Read gets with the slot's snapshot.
type Snapshot struct {
	Where           string     // the predicate
	ConsistentPoint outbox.LSN // the slot's: the snapshot holds every commit before it
	Server          ServerID   // the server the slot was created on
	WALEnd          outbox.LSN // its WAL end then
	Failover        bool       // the slot is a failover slot
}

// Outcome is what Provision did.
type Outcome struct {
	Status     Status // the slot as Provision found it
	Created    bool   // it created the slot
	Backfilled bool   // with a backfill, recorded as done
	// ConsistentPoint is where a slot created here starts.
	ConsistentPoint outbox.LSN
	Rows            int64 // rows backfilled
}

// Provisioner sets the slot up: it adopts an existing slot, creates a
// missing one (ProvisionConfig.Create) with its backfill, runs an unfinished
// backfill again, and refuses a slot it must not use, all under Lock, so
// that a second process waits instead of creating or backfilling too. run
// (package cdc) and migrate use it, so the decision is made in one place
// (decide).
type Provisioner struct {
	cfg ProvisionConfig
	log *slog.Logger
}

// NewProvisioner returns a Provisioner; cfg must be valid (Validate).
func NewProvisioner(cfg ProvisionConfig, log *slog.Logger) (*Provisioner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("setting up slot %s: %w", cfg.Slot, err)
	}
	return &Provisioner{cfg: cfg.withDefaults(), log: log}, nil
}

// Provision sets the slot up on conn (a regular connection, on which it
// takes Lock). Its refusals say what to do: StandbyError, OtherDatabaseError,
// OldPrimaryError, LostError, UnsyncedError, an unfinished backfill it may
// not run, a fresh install over a table that holds rows.
func (p *Provisioner) Provision(ctx context.Context, conn *pgx.Conn) (Outcome, error) {
	name := p.cfg.Slot
	unlock, err := Lock(ctx, conn, name)
	if err != nil {
		return Outcome{}, err
	}
	defer unlock()
	if p.cfg.Precheck != nil {
		if err := p.cfg.Precheck(ctx, conn); err != nil {
			return Outcome{}, err
		}
	}
	server, err := Identify(ctx, p.cfg.DatabaseURL)
	if err != nil {
		return Outcome{}, err
	}
	st, err := Read(ctx, conn, name)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Status: st}
	if err := refuse(st, p.cfg.PrimaryURL, p.cfg.Names); err != nil {
		return out, err
	}
	// On a standby, outboxd_slots is the primary's.
	catalog, closeCatalog, err := p.standby(ctx, conn, st)
	if err != nil {
		return out, err
	}
	defer closeCatalog()
	// An old primary that came back (a newer primary among the URL's
	// hosts) must not get a slot created or a backfill run on it either.
	if err := NoNewerPrimary(ctx, p.cfg.DatabaseURL, server, p.log); err != nil {
		return out, err
	}
	failover, err := p.cfg.Failover.CreateFailover(st.ServerVersion, p.cfg.Names)
	if err != nil {
		return out, err
	}
	if st.InRecovery && failover {
		// PostgreSQL refuses failover for a slot created on a standby: it
		// is the primary's slots that are synchronized to standbys.
		if p.cfg.Failover == FailoverOn {
			return out, fmt.Errorf("%w: %s: a slot on a standby cannot be a failover slot (PostgreSQL synchronizes the primary's slots to standbys, not a standby's): use %s",
				ErrUnusable, p.cfg.Names.Set(failoverSetting(FailoverOn)), p.cfg.Names.Set(failoverSetting(FailoverAuto)))
		}
		failover = false
	}
	// Without outboxd_slots a pending backfill would go unseen and its rows
	// unpublished: a role that cannot read it is refused (ErrCatalogDenied).
	rec, found, err := ReadRecord(ctx, catalog, name)
	if err != nil {
		return out, err
	}
	// Whoever can write outboxd_slots can make a provisioner with a
	// Backfiller drop the slot (a forged pending backfill) or run the
	// predicate it stores.
	var writers []string
	if p.cfg.Backfill != nil {
		if writers, err = OtherWriters(ctx, catalog); err != nil {
			return out, err
		}
		if len(writers) > 0 {
			p.log.Warn("roles other than this one and the table's owner may write outboxd_slots: a pending backfill recorded there makes run drop the slot and run its predicate; "+
				"revoke INSERT, UPDATE, DELETE and TRUNCATE on outboxd_slots from them (docs/operating.md, Least privilege)", "slot", name, "roles", strings.Join(writers, ","))
		}
	}
	pl, err := decide(facts{slot: name, st: st, rec: rec, found: found, server: server, writers: writers,
		create: p.cfg.Create, backfill: p.cfg.Backfill != nil, where: p.cfg.BackfillWhere, names: p.cfg.Names})
	if err != nil {
		return out, err
	}
	// A backfill that cannot be done (e.g. keep each key's order) is
	// refused before anything is dropped, created or recorded for it.
	if pl.where != "" {
		if err := p.cfg.Backfill.Check(ctx, conn); err != nil {
			return out, err
		}
	}
	switch pl.step {
	case stepAdopt:
		return out, p.adopt(ctx, catalog, st, rec, found, server)
	case stepRerun:
		// Streaming starts only once the backfill is recorded done, so
		// nothing was ever confirmed from this slot: drop it (PostgreSQL
		// refuses while a process uses it: an error here) and start over.
		p.log.Warn("the backfill that goes with the slot did not finish (the process stopped before Kafka acknowledged all of it): backfilling again from a new slot and snapshot; rows published by the first attempt are sent again",
			"slot", name, "backfill_where", pl.where, "created_at", rec.CreatedAt)
		if st.Exists {
			if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_drop_replication_slot($1)`, name); err != nil {
				return out, fmt.Errorf("dropping slot %s to restart its backfill: %w", name, err)
			}
		}
	case stepCreateLost:
		p.log.Warn("the slot was lost: creating it again", "slot", name, "created_by", rec.CreatedBy, "created_at", rec.CreatedAt,
			"system_id", rec.SystemID, "timeline", rec.Timeline, "current_system_id", server.SystemID, "current_timeline", server.Timeline)
	}
	newRec := Record{Slot: name, SystemID: server.SystemID, Timeline: server.Timeline, CreatedBy: p.createdBy(), BackfillWhere: pl.where}
	sc := slotConns{slot: conn, catalog: catalog}
	if st.InRecovery {
		sc.primaryURL = p.cfg.PrimaryURL
		p.log.Info("creating the slot on a standby: asking the primary for the running-transactions record it waits for (pg_log_standby_snapshot)", "slot", name)
	}
	switch {
	case pl.where != "":
		return p.createWithBackfill(ctx, sc, out, newRec, failover)
	case p.cfg.Create == CreateOnFreshInstall:
		return p.createIfEmpty(ctx, sc, out, newRec, failover)
	}
	return p.create(ctx, sc, out, newRec, failover)
}

// slotConns are the connections of a slot's creation: the slot's server
// (conn: a standby when decoding on one) and where outboxd_slots is
// (catalog: the primary then, else conn); primaryURL is set when the slot
// is created on a standby.
type slotConns struct {
	slot, catalog *pgx.Conn
	primaryURL    string
}

// standby returns the connection outboxd_slots is on: conn's own server's
// when it is a primary, else the primary's (PrimaryURL), after checking
// that the standby can keep a slot (CheckStandby).
func (p *Provisioner) standby(ctx context.Context, conn *pgx.Conn, st Status) (*pgx.Conn, func(), error) {
	catalog, closeCatalog, err := Catalog(ctx, conn, st.InRecovery, p.cfg.PrimaryURL, "")
	if err != nil || !st.InRecovery {
		return catalog, closeCatalog, err
	}
	facts, err := ReadStandbyFacts(ctx, conn, catalog)
	if err == nil {
		err = CheckStandby(facts, p.cfg.Names)
	}
	if err != nil {
		closeCatalog()
		return nil, nil, err
	}
	return catalog, closeCatalog, nil
}

func (p *Provisioner) createdBy() string {
	if p.cfg.Create == CreateOnFreshInstall {
		return CreatedByMigrate
	}
	return CreatedByRun
}

// refuse refuses a slot no provisioner may touch: on a standby, or of
// another database of the server (slot names are per server: another
// database's slot is never adopted, recorded, dropped for a backfill or
// streamed from here).
func refuse(st Status, primaryURL string, n field.Names) error {
	if err := StandbyRefusal(st, primaryURL, n); err != nil {
		return err
	}
	switch {
	case st.OtherDatabase:
		return OtherDatabaseError(st, n)
	}
	return nil
}

// step is what Provision does with the slot.
type step int

const (
	stepAdopt      step = iota + 1 // the slot exists: keep it
	stepCreate                     // create the missing slot, of which outboxd_slots knows nothing
	stepCreateLost                 // create again the missing slot that outboxd_slots records: it was lost
	stepRerun                      // an unfinished backfill: drop the slot where it exists, create it and backfill
)

// plan is decide's answer: the step, and the backfill predicate that goes
// with creating the slot ("" for none).
type plan struct {
	step  step
	where string
}

// facts is what Provision observed, for decide.
type facts struct {
	slot    string
	st      Status
	rec     Record // outboxd_slots' row for the slot, when found
	found   bool
	server  ServerID
	writers []string // roles other than this one and the owner that may write outboxd_slots
	create  CreatePolicy
	// backfill: the provisioner has a Backfiller, so it runs an
	// unfinished backfill recorded in outboxd_slots.
	backfill bool
	where    string // ProvisionConfig.BackfillWhere
	names    field.Names
}

// decide is the decision tree of Provision, from what it observed to what
// it does or the refusal, with no I/O:
//   - an unfinished backfill (with a Backfiller) is run again whole from a
//     new slot, its predicate joined with BackfillWhere, when the slot
//     exists or may be created; it is refused while other roles may
//     write outboxd_slots, or when its stored predicate fails the checks
//     of --backfill-where;
//   - an existing slot is adopted;
//   - a missing slot is refused as lost (LostError) with CreateNever, and
//     with CreateOnFreshInstall where outboxd_slots records it;
//   - otherwise it is created (again, when recorded: lost).
func decide(f facts) (plan, error) {
	where := f.where
	pending := f.backfill && f.found && f.rec.BackfillPending()
	if pending {
		if len(f.writers) > 0 {
			// The record may not be outboxd's: its predicate would run as
			// SQL in outboxd's snapshot, and the slot be dropped for it.
			return plan{}, fmt.Errorf("the unfinished backfill of slot %s recorded in outboxd_slots is not run while roles other than this one and the table's owner may write that table (%s): "+
				"revoke INSERT, UPDATE, DELETE and TRUNCATE on outboxd_slots from them and start again", f.slot, strings.Join(f.writers, ", "))
		}
		if err := CheckBackfillWhere(f.rec.BackfillWhere); err != nil {
			return plan{}, fmt.Errorf("the unfinished backfill of slot %s recorded in outboxd_slots: its backfill_where %w; correct or delete that row", f.slot, err)
		}
		// The unfinished backfill's rows are still owed, whatever else
		// this start was asked for.
		where = f.rec.BackfillWhere
		if f.where != "" && f.where != f.rec.BackfillWhere {
			where = "(" + f.rec.BackfillWhere + ") OR (" + f.where + ")"
		}
	}
	switch {
	case pending && (f.st.Exists || f.create == CreateMissing):
		return plan{step: stepRerun, where: where}, nil
	case f.st.Exists:
		return plan{step: stepAdopt}, nil
	case f.create == CreateNever, f.create == CreateOnFreshInstall && f.found:
		return plan{}, LostError(f.slot, f.rec, f.found, f.server.SystemID, f.server.Timeline, f.names)
	case f.found:
		return plan{step: stepCreateLost, where: where}, nil
	}
	return plan{step: stepCreate, where: where}, nil
}

// adopt keeps the existing slot (Adopt) and, where the failover mode asks,
// makes it a failover slot. Its refusal of a slot not synchronized across
// a failover is returned; failing to write the record is returned only
// with RecordRequired, and logged otherwise.
func (p *Provisioner) adopt(ctx context.Context, conn *pgx.Conn, st Status, rec Record, found bool, server ServerID) error {
	err := Adopt(ctx, conn, st, rec, found, server.SystemID, server.Timeline, p.cfg.PrimaryURL != "", p.cfg.Names, p.log)
	switch {
	case Permanent(err), err != nil && p.cfg.RecordRequired:
		return err
	case err != nil:
		p.log.Warn("could not record the slot in outboxd_slots; a lost slot will not be recognized as lost", "slot", st.Slot, "err", err)
	}
	if p.cfg.BackfillWhere != "" {
		p.log.Info("the slot exists: no backfill ("+p.cfg.Names.Of("BackfillWhere")+" applies only when the slot is created)", "slot", st.Slot)
	}
	// A standby's slot cannot be a failover slot (PostgreSQL synchronizes
	// a primary's slots to its standbys).
	if !st.InRecovery && p.cfg.Failover.AlterFailover(st, p.cfg.Names, p.log) {
		return turnFailoverOn(ctx, p.cfg.DatabaseURL, st, p.log)
	}
	return nil
}

// create creates the slot at the current position, without a backfill.
func (p *Provisioner) create(ctx context.Context, sc slotConns, out Outcome, rec Record, failover bool) (Outcome, error) {
	stop := askForSnapshots(ctx, sc.primaryURL, p.log)
	lsn, err := Create(ctx, sc.slot, rec.Slot, failover)
	stop()
	if err != nil {
		return out, err
	}
	out.Created, out.ConsistentPoint = true, lsn
	p.log.Warn("created the replication slot: outbox rows committed before now are not published (use "+p.cfg.Names.Of("BackfillWhere")+" to publish them)",
		"slot", rec.Slot, "lsn", lsn, "failover", failover)
	rec.ConsistentPoint = lsn
	return out, p.record(ctx, sc.catalog, rec)
}

// createIfEmpty creates the slot on a fresh install: only when the outbox
// table holds no row in the slot's own snapshot (a row committed while
// the slot was being created is either in that snapshot, and refused, or
// in the slot).
func (p *Provisioner) createIfEmpty(ctx context.Context, sc slotConns, out Outcome, rec Record, failover bool) (Outcome, error) {
	table, err := sqlquote.ParseQualified(p.cfg.Table)
	if err != nil {
		return out, err
	}
	stop := askForSnapshots(ctx, sc.primaryURL, p.log)
	lsn, empty, err := createIfEmpty(ctx, p.cfg.DatabaseURL, rec.Slot, sc.slot, table, failover)
	stop()
	if err != nil {
		return out, err
	}
	if !empty {
		n := p.cfg.Names
		noSlot := n.Run("migrate", createSetting(false))
		return out, fmt.Errorf("%s already holds rows, which a slot created now would never publish: to publish them, run %s "+
			"and then %s (e.g. \"published_at IS NULL\" after a polling relay); "+
			"to leave them unpublished, run %s and then %s", p.cfg.Table, noSlot, n.Run("run", createSetting(true), backfillSetting("<predicate>")), noSlot, n.Run("run", createSetting(true)))
	}
	out.Created, out.ConsistentPoint = true, lsn
	rec.ConsistentPoint = lsn
	if err := p.record(ctx, sc.catalog, rec); err != nil {
		return out, err
	}
	p.log.Info("created replication slot; it retains WAL until `outboxd run` confirms it", "slot", rec.Slot, "lsn", lsn)
	return out, nil
}

// record saves the record of a slot just created: an error with
// RecordRequired, logged otherwise.
func (p *Provisioner) record(ctx context.Context, conn *pgx.Conn, rec Record) error {
	err := SaveRecord(ctx, conn, rec)
	if err != nil && !p.cfg.RecordRequired {
		p.log.Warn("could not record the slot in outboxd_slots; a lost slot will not be recognized as lost", "slot", rec.Slot, "err", err)
		return nil
	}
	return err
}

// createWithBackfill records the backfill as pending, creates the slot
// with an exported snapshot, has the Backfiller read the matching rows as
// of that snapshot and wait until they are published, and records the
// backfill as done. Streaming then starts at the slot's consistent point.
func (p *Provisioner) createWithBackfill(ctx context.Context, sc slotConns, out Outcome, rec Record, failover bool) (Outcome, error) {
	name := rec.Slot
	// Pending before the slot exists: a crash at any point after this is
	// recognized on the next start, which backfills again.
	if err := SaveRecord(ctx, sc.catalog, rec); err != nil {
		return out, fmt.Errorf("a backfill needs outboxd_slots to survive a crash: %w", err)
	}
	stop := askForSnapshots(ctx, sc.primaryURL, p.log)
	cp, tx, server, walEnd, err := createWithSnapshot(ctx, p.cfg.DatabaseURL, name, sc.slot, failover)
	stop()
	if err != nil {
		return out, err
	}
	out.Created, out.ConsistentPoint = true, cp
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only; committed below when all went well
	// The reading waits on Kafka (the pump's window): a statement_timeout
	// meant for the application's queries must not cut it.
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
		return out, fmt.Errorf("starting the backfill transaction: %w", err)
	}
	rows, err := p.cfg.Backfill.Read(ctx, tx, Snapshot{Where: rec.BackfillWhere, ConsistentPoint: cp, Server: server, WALEnd: walEnd, Failover: failover})
	if err != nil {
		return out, fmt.Errorf("backfilling slot %s (the next start backfills again from a new slot): %w", name, err)
	}
	// Everything is read: end the snapshot's transaction before waiting
	// for Kafka, so that it does not sit idle in transaction.
	if err := tx.Commit(ctx); err != nil {
		return out, fmt.Errorf("ending the backfill transaction: %w", err)
	}
	if err := p.cfg.Backfill.Wait(ctx, cp); err != nil {
		return out, fmt.Errorf("backfilling slot %s (the next start backfills again from a new slot): %w", name, err)
	}
	if err := MarkBackfilled(ctx, sc.catalog, name, cp, rows); err != nil {
		return out, fmt.Errorf("backfill of slot %s acknowledged but not recorded (the next start backfills again): %w", name, err)
	}
	out.Backfilled, out.Rows = true, rows
	return out, nil
}

// ErrBackfillUnderWay: outboxd_slots records the slot's backfill as
// unfinished while the slot exists: another process is backfilling it (it
// streams only once Kafka acknowledged the backfill), or died doing it.
var ErrBackfillUnderWay = errors.New("a backfill of the slot is under way")

// Ready is what each replication session checks before it streams: the
// slot exists and can be used (Ensure). A missing slot is refused with
// LostError (dropped while the process ran, or gone in a failover); one
// whose backfill is unfinished is in use (an *InUseError wrapping
// ErrBackfillUnderWay): wait as for a slot in use.
func (p *Provisioner) Ready(ctx context.Context, conn *pgx.Conn) (Status, error) {
	name := p.cfg.Slot
	info, err := Ensure(ctx, conn, name, p.cfg.PrimaryURL, p.cfg.Names)
	missing := errors.Is(err, ErrMissing)
	if err != nil && !missing {
		return info, err
	}
	inRecovery := info.InRecovery
	if missing {
		// Ensure returns no status with a missing slot; a standby's
		// catalog is still the primary's.
		if inRecovery, err = inRecoveryNow(ctx, conn); err != nil {
			return Status{}, err
		}
	}
	catalog, closeCatalog, err := Catalog(ctx, conn, inRecovery, p.cfg.PrimaryURL, "")
	if err != nil {
		return info, err
	}
	defer closeCatalog()
	if missing {
		return Status{}, p.lost(ctx, catalog)
	}
	if rec, _, err := ReadRecord(ctx, catalog, name); err == nil && rec.BackfillPending() {
		return info, &InUseError{Slot: name, Err: ErrBackfillUnderWay}
	}
	return info, nil
}

// inRecoveryNow asks whether conn's server is a standby.
func inRecoveryNow(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var in bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&in); err != nil {
		return false, fmt.Errorf("asking whether the server is in recovery: %w", err)
	}
	return in, nil
}

// lost is the error for the slot found missing by a session: LostError,
// or ErrMissing with what kept it from saying more. catalog is where
// outboxd_slots is.
func (p *Provisioner) lost(ctx context.Context, catalog *pgx.Conn) error {
	name := p.cfg.Slot
	rec, found, err := ReadRecord(ctx, catalog, name)
	if err != nil {
		return fmt.Errorf("%w: %s (and %w)", ErrMissing, name, err)
	}
	server, err := Identify(ctx, p.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("%w: %s (and %w)", ErrMissing, name, err)
	}
	return LostError(name, rec, found, server.SystemID, server.Timeline, p.cfg.Names)
}
