package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// backfillLogInterval is how often a running backfill logs its progress.
const backfillLogInterval = 10 * time.Second

// backfill hands the pump, in one transaction that commits at the slot's
// consistent point cp with the snapshot's time as commit time, the rows of
// every table of the publication that match where (and the publication's
// own row filter), as tx (holding the slot's exported snapshot) sees them:
// table by table (in schema and table name order), each in the order its
// rows were written (see backfillOrder), with the columns the publication
// publishes. A table whose order cannot be told is refused before anything
// is handed over. It returns once every row is handed over; drainBackfill
// then waits for Kafka.
func (s *Streamer) backfill(ctx context.Context, tx pgx.Tx, where string, cp outbox.LSN) (int64, error) {
	tables, err := s.backfillTables(ctx, tx)
	if err != nil {
		return 0, err
	}
	var snapshotTime time.Time
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.now()`).Scan(&snapshotTime); err != nil {
		return 0, fmt.Errorf("reading the snapshot's time: %w", err)
	}
	var total int64
	for i := range tables {
		t := &tables[i]
		var n, unordered int64
		if err := tx.QueryRow(ctx, t.countSQL(t.id, where)).Scan(&n, &unordered); err != nil {
			return 0, fmt.Errorf("counting the rows of %s matching %s: %w", t.Name.Sanitize(), s.cfg.Names.Of("BackfillWhere"), err)
		}
		s.log.Info("backfill order", "table", t.Name.Sanitize(), "order_by", t.orderBy(t.id), "rows", n)
		if unordered > 0 {
			s.log.Warn("rows to backfill have no value in the ordering column: they are published after the table's other rows, in id order, which need not be the order they were written in",
				"table", t.Name.Sanitize(), "order_column", t.order, "rows", unordered)
		}
		total += n
	}
	s.counters.backfillTotal.Store(total)
	s.log.Info("backfilling", "slot", s.cfg.Slot, "tables", len(tables), "rows_total", total)

	s.win.Start(0)
	snap, begin, err := decode.NewSnapshot(cp, snapshotTime)
	if err != nil {
		return 0, err
	}
	lay := layout.New(s.columns())
	if err := s.apply(ctx, lay, begin); err != nil {
		return 0, err
	}
	var done int64
	lastLog := time.Now()
	for _, t := range tables {
		rel, err := snap.Table(t.Name[0], t.Name[1], t.Published())
		if err != nil {
			return done, err
		}
		rows, err := tx.Query(ctx, t.selectSQL(t.id, where), pgx.QueryResultFormats{pgx.TextFormatCode})
		if err != nil {
			return done, fmt.Errorf("reading %s: %w", t.Name.Sanitize(), err)
		}
		for rows.Next() {
			m, err := snap.Row(rel, rows.RawValues())
			if err == nil {
				err = s.apply(ctx, lay, m)
			}
			if err != nil {
				rows.Close()
				return done, err
			}
			done++
			s.counters.backfillDone.Store(done)
			if time.Since(lastLog) >= backfillLogInterval {
				lastLog = time.Now()
				s.log.Info("backfilling", "slot", s.cfg.Slot, "table", t.Name.Sanitize(), "rows_done", done, "rows_total", total)
			}
		}
		if err := rows.Err(); err != nil {
			return done, fmt.Errorf("reading %s: %w", t.Name.Sanitize(), err)
		}
	}
	commit, err := snap.Commit()
	if err != nil {
		return done, err
	}
	return done, s.apply(ctx, lay, commit)
}

// drainBackfill waits until Kafka acknowledged every backfilled record:
// the pump's watermark reached the consistent point.
func (s *Streamer) drainBackfill(ctx context.Context, cp outbox.LSN) error {
	if err := s.win.Drain(ctx); err != nil {
		return fmt.Errorf("waiting for Kafka to acknowledge the backfill: %w", err)
	}
	if err := s.win.Err(); err != nil {
		return err
	}
	if got := s.win.Flushed(); got != cp {
		return fmt.Errorf("%w (watermark %s, consistent point %s)", errBackfillUnacknowledged, got, cp)
	}
	return nil
}

// apply hands one backfilled message on as the stream would: a
// row that cannot become a record is dead-lettered or a permanent error.
func (s *Streamer) apply(ctx context.Context, lay *layout.Layout, m decode.Message) error {
	return handOn(ctx, s.out, lay, m, nil)
}

// handOn lays m out and hands it to out: a row that cannot become a
// record is rejected (dead-lettered, or a permanent error). edit, when
// not nil, changes each record first.
func handOn(ctx context.Context, out outbox.Stage, lay *layout.Layout, m decode.Message, edit func(*outbox.Event)) error {
	c, err := change(lay, &m)
	var re *outbox.RowError
	switch {
	case errors.As(err, &re):
		return out.Reject(ctx, re)
	case err != nil:
		return err
	}
	if edit != nil && c.Kind == outbox.ChangeEvent {
		edit(&c.Event)
	}
	return out.Apply(ctx, c)
}

// ErrBackfillUnordered: a table of the publication has nothing that tells
// the order its rows were written in, so a backfill would publish each
// key's rows out of order (issue 37). Refused before anything is published.
var ErrBackfillUnordered = errors.New("the backfill cannot publish each key's rows in the order they were written")

// backfillTables lists the publication's tables (slot.ReadPublication;
// those of which it publishes no column have no rows to give) with the
// column each is read in order of (backfillOrder): an error, permanent,
// when the publication has none or one cannot be ordered.
func (s *Streamer) backfillTables(ctx context.Context, q slot.Querier) ([]backfillTable, error) {
	all, err := slot.ReadPublication(ctx, q, s.cfg.Publication)
	if err != nil {
		return nil, err
	}
	var tables []backfillTable
	for _, t := range all {
		if len(t.Published()) > 0 {
			tables = append(tables, backfillTable{Table: t})
		}
	}
	if len(tables) == 0 {
		return nil, fmt.Errorf("%w: publication %s covers no tables: nothing to backfill from", slot.ErrTableUnusable, s.cfg.Publication)
	}
	var errs []error
	for i := range tables {
		t := &tables[i]
		m := s.cfg.Columns.For(t.Name[0], t.Name[1]).WithDefaults() // its own mapping, when it has one
		t.id = m.ID
		if t.order, err = backfillOrder(t.Name.Sanitize(), t.Columns, m.ID, m.Timestamp, s.cfg.BackfillOrderColumn, s.cfg.Names); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, permanent(fmt.Errorf("choosing the order of each table's backfill (nothing was published): %w", errors.Join(errs...)))
	}
	return tables, nil
}

// orderTypes are the types an ordering column may have: they sort as the
// values were taken (a time, a sequence's number).
var orderTypes = map[uint32]string{
	pgtype.TimestamptzOID: "timestamp with time zone",
	pgtype.TimestampOID:   "timestamp without time zone",
	pgtype.Int8OID:        "bigint",
	pgtype.Int4OID:        "integer",
	pgtype.Int2OID:        "smallint",
}

// orderHelp says how to name an ordering column.
func orderHelp(n field.Names) string {
	return "name a column that holds the order rows are written in with " + n.Of("BackfillOrderColumn") + " " +
		"(timestamptz, timestamp, bigint, integer or smallint, e.g. DEFAULT clock_timestamp() or a bigserial; ties are broken by the id column)"
}

// backfillOrder chooses the column a table's backfill is read in order
// of, so that each key's rows are published in the order they were
// written (a key's rows are all in one table: keys are per table). The
// rule, in this order:
//
//  1. orderColumn (BackfillOrderColumn), when given: every table must
//     have it, of a type in orderTypes.
//  2. The id column, when it is an integer filled from a sequence
//     (identity, serial, bigserial: the default table): a sequence's
//     values are taken in insert order, and a key's rows are written by
//     one writer at a time.
//  3. timestampColumn (Columns.Timestamp), when the table has it, a
//     timestamptz or timestamp.
//
// Anything else (a uuid, text or varchar id, an integer id the
// application assigns) is an error wrapping ErrBackfillUnordered. The
// rows are read ORDER BY <column> NULLS LAST, <id>; for rule 2 just id.
//
// cols are every column of the table, published or not: a column list may
// leave the ordering column out, and ORDER BY can still read it.
func backfillOrder(table string, cols []slot.Column, idColumn, timestampColumn, orderColumn string, n field.Names) (string, error) {
	find := func(name string) (slot.Column, bool) {
		for _, c := range cols {
			if c.Name == name {
				return c, true
			}
		}
		return slot.Column{}, false
	}
	if orderColumn != "" {
		c, ok := find(orderColumn)
		if !ok {
			return "", fmt.Errorf("%w: table %s has no column %q (%s)", ErrBackfillUnordered, table, orderColumn, n.Of("BackfillOrderColumn"))
		}
		if _, ok := orderTypes[c.TypeOID]; !ok {
			return "", fmt.Errorf("%w: table %s: ordering column %q (%s) has %s, want timestamptz, timestamp, bigint, integer or smallint",
				ErrBackfillUnordered, table, orderColumn, n.Of("BackfillOrderColumn"), describeOID(c.TypeOID))
		}
		return orderColumn, nil
	}
	id, ok := find(idColumn)
	if !ok {
		return "", fmt.Errorf("%w: table %s has no id column %q", ErrBackfillUnordered, table, idColumn)
	}
	isInt := id.TypeOID == pgtype.Int8OID || id.TypeOID == pgtype.Int4OID || id.TypeOID == pgtype.Int2OID
	if isInt && id.Sequence {
		return idColumn, nil
	}
	if timestampColumn != "" {
		if c, ok := find(timestampColumn); ok && (c.TypeOID == pgtype.TimestamptzOID || c.TypeOID == pgtype.TimestampOID) {
			return timestampColumn, nil
		}
	}
	why := fmt.Sprintf("its id column %q has %s, which does not sort in the order rows are written", idColumn, describeOID(id.TypeOID))
	if isInt {
		why = fmt.Sprintf("its id column %q is an integer not filled from a sequence (no identity, no DEFAULT nextval(...)), so it need not sort in the order rows are written", idColumn)
	}
	ts := "no " + n.Of("Columns.Timestamp") + " is given"
	if timestampColumn != "" {
		ts = fmt.Sprintf("the table has no timestamptz or timestamp column %q (%s)", timestampColumn, n.Of("Columns.Timestamp"))
	}
	return "", fmt.Errorf("%w: table %s: %s, and %s: %s",
		ErrBackfillUnordered, table, why, ts, orderHelp(n))
}

// describeOID names a column type for the ordering errors.
func describeOID(oid uint32) string {
	if n, ok := orderTypes[oid]; ok {
		return "type " + n
	}
	switch oid {
	case pgtype.UUIDOID:
		return "type uuid"
	case pgtype.TextOID:
		return "type text"
	case pgtype.VarcharOID:
		return "type character varying"
	}
	return fmt.Sprintf("type oid %d", oid)
}

// backfillTable is a table of the publication (its columns, which it
// publishes, its row filter) and the column its rows are read in order of.
type backfillTable struct {
	slot.Table
	order string // the ordering column (backfillOrder); the id column when it orders by itself
	id    string // the id column, the tie-breaker
}

// filter is the WHERE clause: the publication's row filter and the predicate.
func (t backfillTable) filter(where string) string {
	if t.RowFilter == "" {
		return "(" + where + ")"
	}
	return "(" + t.RowFilter + ") AND (" + where + ")"
}

// orderBy is the ORDER BY list: the ordering column (NULLs last), then
// the id as the tie-breaker; the id alone when it is the ordering column.
func (t backfillTable) orderBy(idColumn string) string {
	id := sqlquote.Identifier(idColumn)
	if t.order == "" || t.order == idColumn {
		return id
	}
	return sqlquote.Identifier(t.order) + " NULLS LAST, " + id
}

// countSQL counts the matching rows, and those with no value in the
// ordering column (0 when the id orders).
func (t backfillTable) countSQL(idColumn, where string) string {
	unordered := "0::int8"
	if t.order != "" && t.order != idColumn {
		unordered = "count(*) FILTER (WHERE " + sqlquote.Identifier(t.order) + " IS NULL)"
	}
	return "SELECT count(*), " + unordered + " FROM " + t.Name.Sanitize() + " WHERE " + t.filter(where)
}

// selectSQL reads the published columns (text format, as pgoutput sends
// them) of the matching rows in the order they were written (orderBy).
func (t backfillTable) selectSQL(idColumn, where string) string {
	list := ""
	for i, c := range t.Published() {
		if i > 0 {
			list += ", "
		}
		list += sqlquote.Identifier(c.Name)
	}
	return "SELECT " + list + " FROM " + t.Name.Sanitize() + " WHERE " + t.filter(where) + " ORDER BY " + t.orderBy(idColumn)
}
