package slot

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
)

// Ensure checks that the slot exists, is a pgoutput slot of this database
// and has not been invalidated, and returns its state. Its errors wrap
// ErrMissing, ErrUnusable or ErrInvalidated when the slot cannot be used.
// A server in recovery is refused (ErrStandby) unless primaryURL is given
// (decoding on a standby, 16+). It never creates a slot: see Create.
func Ensure(ctx context.Context, conn *pgx.Conn, slot, primaryURL string, n field.Names) (Status, error) {
	info, err := Read(ctx, conn, slot)
	if err != nil {
		return Status{}, err
	}
	if err := StandbyRefusal(info, primaryURL, n); err != nil {
		return info, err
	}
	if !info.Exists {
		return Status{}, fmt.Errorf("%w: %s", ErrMissing, slot)
	}
	switch {
	case info.Plugin != "pgoutput":
		return info, fmt.Errorf("%w: %s uses plugin %q, not pgoutput: drop it or choose another %s", ErrUnusable, slot, info.Plugin, n.Of("Slot"))
	case info.OtherDatabase:
		return info, OtherDatabaseError(info, n)
	case info.Lost():
		return info, invalidatedError(info, n)
	}
	return info, nil
}

// Create creates the slot (plugin pgoutput) at the server's current
// position and returns that position, its consistent point; failover
// (17+ only) makes it a failover slot. A slot of that name that another
// process created first is an error too: the caller holds Lock, so only a
// process that does not is racing it.
func Create(ctx context.Context, conn *pgx.Conn, slot string, failover bool) (outbox.LSN, error) {
	q := `SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')`
	args := []any{slot}
	if failover {
		q = `SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`
	}
	var lsn string
	if err := conn.QueryRow(ctx, q, args...).Scan(&lsn); err != nil {
		return 0, fmt.Errorf("creating replication slot %s: %w", slot, err)
	}
	return outbox.ParseLSN(lsn)
}

// CheckCovers checks that table (SQL syntax) exists and that
// publication publishes its rows (ReadCoverage). Its errors wrap
// ErrTableMissing or ErrTableNotPublished and say what to do: outboxd
// never changes what an existing publication publishes on its own.
func CheckCovers(ctx context.Context, q Querier, publication, table string, n field.Names) error {
	c, err := ReadCoverage(ctx, q, publication, table)
	switch {
	case err != nil:
		return err
	case !c.Exists:
		return fmt.Errorf("checking publication %s covers %s: %w: create it, or give %s the name of the existing outbox table", publication, table, ErrTableMissing, n.Of("Table"))
	case !c.Published:
		return fmt.Errorf("checking publication %s covers %s: %w, so its rows would never be published: "+
			"add it with `ALTER PUBLICATION %s ADD TABLE %s` (every table of the publication is streamed, so each must fit the column flags), "+
			"or give it a publication and slot of its own (%s and %s, on migrate and run)",
			publication, table, ErrTableNotPublished, c.Publication, c.Table, n.Of("Publication"), n.Of("Slot"))
	}
	return nil
}
