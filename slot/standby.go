package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/lib/field"
)

// Decoding on a standby (PostgreSQL 16+): the slot lives on a physical
// standby, whose walsender reads and decodes the WAL, so that the primary
// spends nothing on it. What must be written goes to the primary (the
// PrimaryURL of the configurations here): outboxd_slots, heartbeats, and
// the running-transactions record a slot being created on the standby
// waits for.

// StandbyVersion is the first PostgreSQL version that decodes on a
// standby.
const StandbyVersion = 160000

// ErrStandbyUnsafe: the standby lacks what keeps a slot on it from being
// invalidated (hot_standby_feedback, a physical slot on the primary), or
// what decoding there needs (wal_level logical on both servers).
var ErrStandbyUnsafe = errors.New("the standby cannot keep a logical slot safely")

// StandbyFacts is what CheckStandby reads of a standby and its primary.
type StandbyFacts struct {
	Version            int    // the standby's server_version_num
	HotStandbyFeedback bool   // the standby's hot_standby_feedback
	PrimarySlotName    string // the standby's primary_slot_name
	Receiving          bool   // its WAL receiver is streaming
	ReceiverSlot       string // the slot its WAL receiver streams from
	StandbyWALLevel    string // the standby's wal_level
	PrimaryWALLevel    string // the primary's
	PrimaryInRecovery  bool   // the primary URL reaches a standby
	PhysicalSlotActive *bool  // the primary's physical slot PrimarySlotName is active (nil: no such slot there)
}

// ReadStandbyFacts reads what CheckStandby needs: of the standby on
// standby, of its primary on primary.
func ReadStandbyFacts(ctx context.Context, standby, primary Querier) (StandbyFacts, error) {
	var f StandbyFacts
	var feedback string
	if err := standby.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int,
			pg_catalog.current_setting('hot_standby_feedback'), pg_catalog.current_setting('primary_slot_name'),
			pg_catalog.current_setting('wal_level'),
			coalesce((SELECT status = 'streaming' FROM pg_catalog.pg_stat_wal_receiver LIMIT 1), false),
			coalesce((SELECT slot_name FROM pg_catalog.pg_stat_wal_receiver LIMIT 1), '')`).
		Scan(&f.Version, &feedback, &f.PrimarySlotName, &f.StandbyWALLevel, &f.Receiving, &f.ReceiverSlot); err != nil {
		return f, fmt.Errorf("reading the standby's settings: %w", err)
	}
	f.HotStandbyFeedback = feedback == "on"
	if err := primary.QueryRow(ctx, `SELECT pg_catalog.current_setting('wal_level'), pg_catalog.pg_is_in_recovery()`).
		Scan(&f.PrimaryWALLevel, &f.PrimaryInRecovery); err != nil {
		return f, fmt.Errorf("reading the primary's settings: %w", err)
	}
	if name := f.slotName(); name != "" {
		var active bool
		err := primary.QueryRow(ctx, `SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1 AND slot_type = 'physical'`, name).Scan(&active)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return f, fmt.Errorf("reading the primary's physical slot %s: %w", name, err)
		default:
			f.PhysicalSlotActive = &active
		}
	}
	return f, nil
}

// slotName is the physical slot the standby streams from: the WAL
// receiver's, else the setting's.
func (f StandbyFacts) slotName() string {
	if f.ReceiverSlot != "" {
		return f.ReceiverSlot
	}
	return f.PrimarySlotName
}

// CheckStandby says, all at once, what keeps the standby of f from
// decoding safely, each problem with its fix: PostgreSQL 15 and older
// (ErrUnsupportedVersion); wal_level below logical on either server; the
// primary URL reaching a standby; hot_standby_feedback off or no physical
// slot between the standby and the primary (ErrStandbyUnsafe: without
// them the primary removes catalog rows the slot still needs and
// PostgreSQL invalidates it, rows_removed). n names the settings.
func CheckStandby(f StandbyFacts, n field.Names) error {
	if f.Version < StandbyVersion {
		return fmt.Errorf("%w: the server of %s is a standby running PostgreSQL %s; decoding on a standby needs PostgreSQL 16 or later: "+
			"upgrade it, or point %s at the primary", ErrUnsupportedVersion, n.Of("DatabaseURL"), versionName(f.Version), n.Of("DatabaseURL"))
	}
	var problems []string
	if f.PrimaryInRecovery {
		problems = append(problems, fmt.Sprintf("%s reaches a server in recovery, not the primary: outboxd writes its catalog and heartbeats there "+
			"(with several hosts, add target_session_attrs=read-write)", n.Of("PrimaryURL")))
	}
	if f.PrimaryWALLevel != "logical" {
		problems = append(problems, fmt.Sprintf("the primary runs with wal_level=%s: set wal_level = logical there and restart it", f.PrimaryWALLevel))
	}
	if f.StandbyWALLevel != "logical" {
		problems = append(problems, fmt.Sprintf("the standby runs with wal_level=%s: set wal_level = logical on it too and restart it", f.StandbyWALLevel))
	}
	if !f.HotStandbyFeedback {
		problems = append(problems, "hot_standby_feedback is off on the standby: without it the primary removes catalog rows the slot still needs "+
			"and PostgreSQL invalidates the slot (rows_removed); set hot_standby_feedback = on and reload the standby")
	}
	switch name := f.slotName(); {
	case name == "":
		problems = append(problems, "the standby streams from the primary without a physical replication slot: hot_standby_feedback holds catalog rows "+
			"back only while it is connected, and the primary may remove them, or the WAL the standby needs, in between; "+
			"create one on the primary (SELECT pg_create_physical_replication_slot('<name>')) and set primary_slot_name = '<name>' on the standby")
	case f.PhysicalSlotActive == nil:
		problems = append(problems, fmt.Sprintf("the standby's primary_slot_name is %s, but the primary has no physical slot of that name: "+
			"create it there (SELECT pg_create_physical_replication_slot('%s'))", name, name))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w (decoding on the standby of %s): %s", ErrStandbyUnsafe, n.Of("DatabaseURL"), strings.Join(problems, "; "))
}

// ErrUnsupportedVersion: the server is too old for what was asked.
var ErrUnsupportedVersion = errors.New("unsupported PostgreSQL version")

// versionName renders server_version_num as PostgreSQL names releases
// (150004: 15.4).
func versionName(v int) string {
	return fmt.Sprintf("%d.%d", v/10000, v%10000)
}

// NoPrimaryError refuses a standby when no primary URL was given: decoding
// on a standby needs one, or the URL should reach the primary. It wraps
// ErrStandby.
func NoPrimaryError(slot string, version int, n field.Names) error {
	if version < StandbyVersion {
		return StandbyError(slot, n)
	}
	return fmt.Errorf("%w: slot %s: to decode on this standby (PostgreSQL 16+), also give the primary's URL as %s: "+
		"outboxd writes its catalog and heartbeats there, which a standby cannot; "+
		"to decode on the primary, point %s at it instead (with several hosts, add target_session_attrs=read-write)",
		ErrStandby, slot, n.Of("PrimaryURL"), n.Of("DatabaseURL"))
}

// StandbyRefusal is the refusal of st's server when it is a standby that
// may not be decoded on (NoPrimaryError): no primary URL was given, or it
// runs PostgreSQL before 16. nil otherwise.
func StandbyRefusal(st Status, primaryURL string, n field.Names) error {
	if st.InRecovery && (primaryURL == "" || st.ServerVersion < StandbyVersion) {
		return NoPrimaryError(st.Slot, st.ServerVersion, n)
	}
	return nil
}

// Catalog returns the connection outboxd_slots is read and written on:
// conn itself when its server is a primary or no primary URL is given,
// else a new connection to primaryURL, which close closes.
func Catalog(ctx context.Context, conn *pgx.Conn, inRecovery bool, primaryURL, name string) (catalog *pgx.Conn, close func(), err error) {
	if !inRecovery || primaryURL == "" {
		return conn, func() {}, nil
	}
	c, err := Connect(ctx, primaryURL, name)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the primary: %w", err)
	}
	return c, func() { c.Close(context.WithoutCancel(ctx)) }, nil
}

// standbySnapshotEvery is how often a slot being created on a standby
// asks the primary for a running-transactions record.
const standbySnapshotEvery = time.Second

// nudgeStandby asks the primary (pg_log_standby_snapshot) for a
// running-transactions record until ctx ends: a slot created on a standby
// waits for one from the primary, which an idle primary writes only every
// few minutes (at checkpoints, bgwriter's LOG_SNAPSHOT_INTERVAL_MS).
// Failures are logged: the creation then takes as long as PostgreSQL
// makes it.
func nudgeStandby(ctx context.Context, primaryURL string, log *slog.Logger) {
	conn, err := Connect(ctx, primaryURL, "")
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("cannot ask the primary for a running-transactions record; creating the slot on the standby waits for the primary's next one", "err", err)
		}
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	t := time.NewTicker(standbySnapshotEvery)
	defer t.Stop()
	for {
		if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_log_standby_snapshot()`); err != nil {
			if ctx.Err() == nil {
				log.Warn("pg_log_standby_snapshot() on the primary failed; creating the slot on the standby waits for the primary's next running-transactions record", "err", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// askForSnapshots starts asking the primary (primaryURL) for the
// running-transactions record a slot being created on a standby waits for
// (nudgeStandby); stop ends the asking and waits for it. With no primary
// URL (the slot's server is a primary) it does nothing.
func askForSnapshots(ctx context.Context, primaryURL string, log *slog.Logger) (stop func()) {
	if primaryURL == "" {
		return func() {}
	}
	nctx, cancel := context.WithCancel(ctx)
	var g errgroup.Group
	g.Go(func() error {
		nudgeStandby(nctx, primaryURL, log)
		return nil
	})
	return func() {
		cancel()
		_ = g.Wait() // the nudge only logs
	}
}
