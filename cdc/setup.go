package cdc

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// provisioner is the slot's Provisioner for cfg (package slot decides what
// to do with the slot; the backfill it may ask for is s's: the rows go
// through the pump).
func (s *Streamer) provisioner(cfg Config, log *slog.Logger) (*slot.Provisioner, error) {
	create := slot.CreateNever
	if cfg.CreateSlot {
		create = slot.CreateMissing
	}
	return slot.NewProvisioner(slot.ProvisionConfig{
		DatabaseURL:   cfg.DatabaseURL,
		PrimaryURL:    cfg.PrimaryURL,
		Slot:          cfg.Slot,
		Failover:      cfg.FailoverSlot,
		Create:        create,
		BackfillWhere: cfg.BackfillWhere,
		Backfill:      streamBackfill{s},
		Names:         cfg.SlotNames(),
		// A backfill over a missing or misspelled publication would find
		// nothing and be recorded as done: checked first, as every
		// session does.
		Precheck: func(ctx context.Context, conn *pgx.Conn) error {
			if err := checkPublication(ctx, conn, cfg, log); err != nil {
				return err
			}
			// A publication that does not publish the configured table
			// would stream without ever publishing its rows.
			if cfg.Table != "" {
				return slot.CheckCovers(ctx, conn, cfg.Publication, cfg.Table, cfg.SlotNames())
			}
			return nil
		},
	}, log)
}

// setUpSlot runs once before the first session: the slot's Provisioner.
// It never creates a slot unless asked (CreateSlot): a slot that is
// missing is a permanent error saying whether it was lost (outboxd_slots
// records it) and how to recover. Asked, it creates the slot and runs the
// backfill that goes with it; a backfill recorded as unfinished (a crash,
// a lost connection) is run again whole from a new slot. All of it
// happens under slot.Lock, so a second outboxd (a standby) waits instead
// of creating or backfilling too.
func (s *Streamer) setUpSlot(ctx context.Context) error {
	conn, err := slot.Connect(ctx, s.cfg.DatabaseURL, s.cfg.ApplicationName)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	out, err := s.prov.Provision(ctx, conn)
	if err != nil {
		return err
	}
	if out.Backfilled {
		s.confirmed = out.ConsistentPoint
		s.log.Info("backfill acknowledged by Kafka; streaming from the slot's consistent point", "slot", s.cfg.Slot, "rows", out.Rows, "consistent_point", out.ConsistentPoint)
	}
	return nil
}

// streamBackfill is the Streamer's side of a backfill the provisioner
// runs: the rows are read as the slot's snapshot sees them and handed to
// the pump as one transaction ending at the slot's consistent point.
type streamBackfill struct{ s *Streamer }

// Check refuses a backfill whose tables cannot keep each key's order
// (backfill checks again, on the snapshot).
func (b streamBackfill) Check(ctx context.Context, conn *pgx.Conn) error {
	_, err := b.s.backfillTables(ctx, conn)
	return err
}

func (b streamBackfill) Read(ctx context.Context, tx pgx.Tx, snap slot.Snapshot) (int64, error) {
	s := b.s
	// The backfill's records come from the slot's server: the first
	// session compares its server with this one.
	s.ident.set(snap.Server, snap.WALEnd)
	s.log.Info("created the replication slot with an exported snapshot; backfilling the rows that match the predicate as of that snapshot",
		"slot", s.cfg.Slot, "consistent_point", snap.ConsistentPoint, "backfill_where", snap.Where, "failover", snap.Failover)
	return s.backfill(ctx, tx, snap.Where, snap.ConsistentPoint)
}

func (b streamBackfill) Wait(ctx context.Context, cp outbox.LSN) error {
	return b.s.drainBackfill(ctx, cp)
}

// errBackfillUnacknowledged: the pump drained without failing, yet its
// watermark did not reach the consistent point.
var errBackfillUnacknowledged = errors.New("not every backfilled record was acknowledged")
