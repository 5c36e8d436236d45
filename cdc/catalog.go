package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/decode"
)

// EnsureSlot checks that the slot exists, is a pgoutput slot of this
// database and has not been invalidated; with create, a missing slot is
// created. It returns the slot's state and whether it created it.
func EnsureSlot(ctx context.Context, conn *pgx.Conn, slot string, create bool) (SlotStatus, bool, error) {
	info, err := readSlot(ctx, conn, slot)
	if err != nil {
		return SlotStatus{}, false, err
	}
	created := false
	if !info.Exists {
		if !create {
			return SlotStatus{}, false, permanent(fmt.Errorf("replication slot %s does not exist: run `outboxd migrate` to create it", slot))
		}
		_, err := conn.Exec(ctx, `SELECT pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "42710":
			// Another process created it first: fine.
		case err != nil:
			return SlotStatus{}, false, fmt.Errorf("creating replication slot %s: %w", slot, err)
		default:
			created = true
		}
		if info, err = readSlot(ctx, conn, slot); err != nil {
			return SlotStatus{}, false, err
		} else if !info.Exists {
			return SlotStatus{}, false, fmt.Errorf("replication slot %s vanished right after its creation", slot)
		}
	}
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		return SlotStatus{}, false, fmt.Errorf("reading the current database: %w", err)
	}
	switch {
	case info.Plugin != "pgoutput":
		return info, created, permanent(fmt.Errorf("replication slot %s uses plugin %q, not pgoutput: drop it or choose another --slot", slot, info.Plugin))
	case info.Database != db:
		return info, created, permanent(fmt.Errorf("replication slot %s belongs to database %q, not %q: choose another --slot", slot, info.Database, db))
	case info.Lost():
		return info, created, permanent(fmt.Errorf("replication slot %s was invalidated (wal_status lost): PostgreSQL removed WAL it still needed (max_slot_wal_keep_size), so outbox rows may be missing from Kafka; reconcile from the outbox table, then drop and recreate the slot deliberately", slot))
	}
	return info, created, nil
}

// CheckPublication checks that the publication exists and that every table
// in it has the outbox columns with usable types. It returns the tables.
func CheckPublication(ctx context.Context, conn *pgx.Conn, publication string, cols decode.Columns) ([]string, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1)`, publication).Scan(&exists); err != nil {
		return nil, fmt.Errorf("reading publication %s: %w", publication, err)
	}
	if !exists {
		return nil, permanent(fmt.Errorf("publication %s does not exist: run `outboxd migrate` (or CREATE PUBLICATION %s FOR TABLE <outbox table> WITH (publish = 'insert'))", publication, publication))
	}
	rows, err := conn.Query(ctx, `SELECT pt.schemaname || '.' || pt.tablename, a.attname, a.atttypid::int8
		FROM pg_catalog.pg_publication_tables pt
		JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
		JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE pt.pubname = $1
		ORDER BY 1, a.attnum`, publication)
	if err != nil {
		return nil, fmt.Errorf("reading the tables of publication %s: %w", publication, err)
	}
	var tables []string
	columns := map[string][]decode.Column{}
	var table, name string
	var oid int64
	_, err = pgx.ForEachRow(rows, []any{&table, &name, &oid}, func() error {
		if _, ok := columns[table]; !ok {
			tables = append(tables, table)
		}
		columns[table] = append(columns[table], decode.Column{Name: name, TypeOID: uint32(oid)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the tables of publication %s: %w", publication, err)
	}
	var errs []error
	for _, t := range tables {
		if err := decode.ValidateTable(t, columns[t], cols); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return tables, permanent(fmt.Errorf("publication %s: %w", publication, errors.Join(errs...)))
	}
	return tables, nil
}

// prepare runs the checks of one session on a regular connection and
// returns the slot's state.
func (s *Streamer) prepare(ctx context.Context) (SlotStatus, error) {
	conn, err := pgx.Connect(ctx, s.cfg.DatabaseURL)
	if err != nil {
		return SlotStatus{}, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tables, err := CheckPublication(ctx, conn, s.cfg.Publication, s.cfg.Columns)
	if err != nil {
		return SlotStatus{}, err
	}
	if len(tables) == 0 {
		s.log.Warn("publication covers no tables: nothing will be published", "publication", s.cfg.Publication)
	}
	info, created, err := EnsureSlot(ctx, conn, s.cfg.Slot, s.cfg.CreateSlot)
	if err != nil {
		return SlotStatus{}, err
	}
	if created {
		s.log.Warn("created replication slot: outbox rows committed before now are not published; run `outboxd migrate` ahead of the application to avoid this gap",
			"slot", s.cfg.Slot, "lsn", info.ConfirmedFlushLSN)
	}
	return info, nil
}

// connectReplication opens the replication connection derived from the URL.
func (s *Streamer) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(s.cfg.DatabaseURL)
	if err != nil {
		return nil, permanent(fmt.Errorf("parsing the database URL: %w", redactURLError(err)))
	}
	cfg.RuntimeParams["replication"] = "database"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "outboxd" // shown in pg_stat_replication
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening the replication connection: %w", err)
	}
	return conn, nil
}
