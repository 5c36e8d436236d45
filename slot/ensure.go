package slot

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/outbox"
)

// Ensure checks that the slot exists, is a pgoutput slot of this database
// and has not been invalidated, and returns its state. Its errors wrap
// ErrMissing, ErrUnusable or ErrInvalidated when the slot cannot be used.
// It never creates a slot: see Create.
func Ensure(ctx context.Context, conn *pgx.Conn, slot string) (Status, error) {
	info, err := Read(ctx, conn, slot)
	if err != nil {
		return Status{}, err
	}
	if info.InRecovery {
		return info, StandbyError(slot)
	}
	if !info.Exists {
		return Status{}, fmt.Errorf("%w: %s", ErrMissing, slot)
	}
	switch {
	case info.Plugin != "pgoutput":
		return info, fmt.Errorf("%w: %s uses plugin %q, not pgoutput: drop it or choose another --slot", ErrUnusable, slot, info.Plugin)
	case info.OtherDatabase:
		return info, OtherDatabaseError(info)
	case info.Lost():
		return info, invalidatedError(info)
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

// CheckCovers checks that table (SQL syntax, as --table) exists and that
// publication publishes its rows (ReadCoverage). Its errors wrap
// ErrTableMissing or ErrTableNotPublished and say what to do: outboxd
// never changes what an existing publication publishes on its own.
func CheckCovers(ctx context.Context, q Querier, publication, table string) error {
	c, err := ReadCoverage(ctx, q, publication, table)
	switch {
	case err != nil:
		return err
	case !c.Exists:
		return fmt.Errorf("checking publication %s covers %s: %w: create it, or give --table the name of the existing outbox table", publication, table, ErrTableMissing)
	case !c.Published:
		return fmt.Errorf("checking publication %s covers %s: %w, so its rows would never be published: "+
			"add it with `ALTER PUBLICATION %s ADD TABLE %s` (every table of the publication is streamed, so each must fit the column flags), "+
			"or give it a publication and slot of its own (--publication and --slot, on migrate and run)",
			publication, table, ErrTableNotPublished, c.Publication, c.Table)
	}
	return nil
}

// CheckPublication checks that the publication exists and that every table
// in it has the outbox columns with usable types. It returns the tables;
// its errors wrap ErrPublicationMissing or ErrTableUnusable, the latter
// listing every problem of every table.
func CheckPublication(ctx context.Context, conn *pgx.Conn, publication string, cols layout.Columns) ([]string, error) {
	exists, err := publicationExists(ctx, conn, publication)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%w: %s: run `outboxd migrate` (or CREATE PUBLICATION %s FOR TABLE <outbox table> WITH (publish = 'insert'))", ErrPublicationMissing, publication, publication)
	}
	tables, columns, err := readColumns(ctx, conn, `SELECT pt.schemaname || '.' || pt.tablename, a.attname, a.atttypid::int8
		FROM pg_catalog.pg_publication_tables pt
		JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
		JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE pt.pubname = $1
		ORDER BY 1, a.attnum`, publication)
	if err != nil {
		return nil, fmt.Errorf("reading the tables of publication %s: %w", publication, err)
	}
	var errs []error
	for _, t := range tables {
		if err := layout.ValidateTable(t, columns[t], cols); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return tables, fmt.Errorf("%w: publication %s: %w", ErrTableUnusable, publication, errors.Join(errs...))
	}
	return tables, nil
}

// CheckTable checks that table (in SQL syntax, e.g. app.events) has the
// outbox columns with usable types, as CheckPublication checks each table
// of a publication: migrate checks an own table with it before creating
// anything for it. Its error wraps ErrTableUnusable.
func CheckTable(ctx context.Context, conn *pgx.Conn, table string, cols layout.Columns) error {
	tables, columns, err := readColumns(ctx, conn, `SELECT n.nspname || '.' || c.relname, a.attname, a.atttypid::int8
		FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE c.oid = pg_catalog.to_regclass($1)
		ORDER BY a.attnum`, table)
	if err != nil {
		return fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	if len(tables) == 0 {
		return fmt.Errorf("%w: %s", ErrTableMissing, table)
	}
	if err := layout.ValidateTable(tables[0], columns[tables[0]], cols); err != nil {
		return fmt.Errorf("%w: %w", ErrTableUnusable, err)
	}
	return nil
}

// readColumns runs a query of (table, column name, type oid) rows in
// column order and groups them by table, the tables in the order met.
func readColumns(ctx context.Context, conn *pgx.Conn, query string, arg any) ([]string, map[string][]outbox.Column, error) {
	rows, err := conn.Query(ctx, query, arg)
	if err != nil {
		return nil, nil, err
	}
	var tables []string
	columns := map[string][]outbox.Column{}
	var table, name string
	var oid int64
	_, err = pgx.ForEachRow(rows, []any{&table, &name, &oid}, func() error {
		if _, ok := columns[table]; !ok {
			tables = append(tables, table)
		}
		columns[table] = append(columns[table], outbox.Column{Name: name, TypeOID: uint32(oid)})
		return nil
	})
	return tables, columns, err
}
