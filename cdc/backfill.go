package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// backfillLogInterval is how often a running backfill logs its progress.
const backfillLogInterval = 10 * time.Second

// backfill hands the pump, in one transaction that commits at the slot's
// consistent point cp with the snapshot's time as commit time, the rows of
// every table of the publication that match where (and the publication's
// own row filter), as tx (holding the slot's exported snapshot) sees them:
// table by table, each in id order, with the columns the publication
// publishes. It returns once every row is handed over; drainBackfill then
// waits for Kafka.
func (s *Streamer) backfill(ctx context.Context, tx pgx.Tx, where string, cp outbox.LSN) (int64, error) {
	tables, err := publicationTables(ctx, tx, s.cfg.Publication)
	if err != nil {
		return 0, err
	}
	if len(tables) == 0 {
		return 0, fmt.Errorf("%w: publication %s covers no tables: nothing to backfill from", slot.ErrTableUnusable, s.cfg.Publication)
	}
	var snapshotTime time.Time
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.now()`).Scan(&snapshotTime); err != nil {
		return 0, fmt.Errorf("reading the snapshot's time: %w", err)
	}
	var total int64
	for i := range tables {
		var n int64
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+tables[i].name.Sanitize()+" WHERE "+tables[i].filter(where)).Scan(&n); err != nil {
			return 0, fmt.Errorf("counting the rows of %s matching --backfill-where: %w", tables[i].name.Sanitize(), err)
		}
		total += n
	}
	s.counters.backfillTotal.Store(total)
	s.log.Info("backfilling", "slot", s.cfg.Slot, "tables", len(tables), "rows_total", total)

	s.pump.Start(0)
	snap, begin, err := decode.NewSnapshot(s.cfg.Columns, cp, snapshotTime)
	if err != nil {
		return 0, err
	}
	if err := s.pump.Apply(ctx, begin); err != nil {
		return 0, err
	}
	var done int64
	lastLog := time.Now()
	for _, t := range tables {
		rel, err := snap.Table(t.name[0], t.name[1], t.columns)
		if err != nil {
			return done, err
		}
		rows, err := tx.Query(ctx, t.selectSQL(s.cfg.Columns.ID, where), pgx.QueryResultFormats{pgx.TextFormatCode})
		if err != nil {
			return done, fmt.Errorf("reading %s: %w", t.name.Sanitize(), err)
		}
		for rows.Next() {
			if err := s.applyRow(ctx, snap, rel, rows.RawValues()); err != nil {
				rows.Close()
				return done, err
			}
			done++
			s.counters.backfillDone.Store(done)
			if time.Since(lastLog) >= backfillLogInterval {
				lastLog = time.Now()
				s.log.Info("backfilling", "slot", s.cfg.Slot, "table", t.name.Sanitize(), "rows_done", done, "rows_total", total)
			}
		}
		if err := rows.Err(); err != nil {
			return done, fmt.Errorf("reading %s: %w", t.name.Sanitize(), err)
		}
	}
	commit, err := snap.Commit()
	if err != nil {
		return done, err
	}
	return done, s.pump.Apply(ctx, commit)
}

// drainBackfill waits until Kafka acknowledged every backfilled record:
// the pump's watermark reached the consistent point.
func (s *Streamer) drainBackfill(ctx context.Context, cp outbox.LSN) error {
	if err := s.pump.Drain(ctx); err != nil {
		return fmt.Errorf("waiting for Kafka to acknowledge the backfill: %w", err)
	}
	if err := s.pump.Err(); err != nil {
		return err
	}
	if got := s.pump.Flushed(); got != cp {
		return fmt.Errorf("%w (watermark %s, consistent point %s)", errBackfillUnacknowledged, got, cp)
	}
	return nil
}

// applyRow hands one row to the pump: an event, or a row that cannot
// become one (dead-lettered or a permanent error, as in the stream).
func (s *Streamer) applyRow(ctx context.Context, snap *decode.Snapshot, rel uint32, values [][]byte) error {
	m, err := snap.Row(rel, values)
	var re *decode.RowError
	switch {
	case errors.As(err, &re):
		return s.pump.Reject(ctx, re)
	case err != nil:
		return err
	}
	return s.pump.Apply(ctx, m)
}

// backfillTable is a table of the publication: its published columns and
// its row filter (PostgreSQL 15+ publications may have both).
type backfillTable struct {
	name      pgx.Identifier // schema, table
	columns   []decode.Column
	rowFilter string // "" when none
}

// filter is the WHERE clause: the publication's row filter and the predicate.
func (t backfillTable) filter(where string) string {
	if t.rowFilter == "" {
		return "(" + where + ")"
	}
	return "(" + t.rowFilter + ") AND (" + where + ")"
}

// selectSQL reads the published columns (text format, as pgoutput sends
// them) of the matching rows in id order.
func (t backfillTable) selectSQL(idColumn, where string) string {
	list := ""
	for i, c := range t.columns {
		if i > 0 {
			list += ", "
		}
		list += pgx.Identifier{c.Name}.Sanitize()
	}
	return "SELECT " + list + " FROM " + t.name.Sanitize() + " WHERE " + t.filter(where) + " ORDER BY " + pgx.Identifier{idColumn}.Sanitize()
}

// publicationTables lists the publication's tables with the columns it
// publishes (no dropped or generated columns, only those of a column list)
// in table order, and their row filters.
func publicationTables(ctx context.Context, tx pgx.Tx, publication string) ([]backfillTable, error) {
	rows, err := tx.Query(ctx, `SELECT pt.schemaname, pt.tablename, coalesce(pt.rowfilter, ''), a.attname, a.atttypid::int8, a.atttypmod
		FROM pg_catalog.pg_publication_tables pt
		JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
		JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
			AND a.attname = ANY (pt.attnames)
		WHERE pt.pubname = $1
		ORDER BY 1, 2, a.attnum`, publication)
	if err != nil {
		return nil, fmt.Errorf("reading the tables of publication %s: %w", publication, err)
	}
	var tables []backfillTable
	var schema, table, filter, column string
	var oid int64
	var mod int32
	_, err = pgx.ForEachRow(rows, []any{&schema, &table, &filter, &column, &oid, &mod}, func() error {
		if n := len(tables); n == 0 || tables[n-1].name[0] != schema || tables[n-1].name[1] != table {
			tables = append(tables, backfillTable{name: pgx.Identifier{schema, table}, rowFilter: filter})
		}
		t := &tables[len(tables)-1]
		t.columns = append(t.columns, decode.Column{Name: column, TypeOID: uint32(oid), TypeMod: mod})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the tables of publication %s: %w", publication, err)
	}
	return tables, nil
}
