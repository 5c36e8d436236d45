package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/internal/sqlquote"
	"github.com/outboxd/outboxd/layout"
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
		if err := tx.QueryRow(ctx, t.countSQL(s.cfg.Columns.ID, where)).Scan(&n, &unordered); err != nil {
			return 0, fmt.Errorf("counting the rows of %s matching --backfill-where: %w", t.name.Sanitize(), err)
		}
		s.log.Info("backfill order", "table", t.name.Sanitize(), "order_by", t.orderBy(s.cfg.Columns.ID), "rows", n)
		if unordered > 0 {
			s.log.Warn("rows to backfill have no value in the ordering column: they are published after the table's other rows, in id order, which need not be the order they were written in",
				"table", t.name.Sanitize(), "order_column", t.order, "rows", unordered)
		}
		total += n
	}
	s.counters.backfillTotal.Store(total)
	s.log.Info("backfilling", "slot", s.cfg.Slot, "tables", len(tables), "rows_total", total)

	s.pump.Start(0)
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
		rel, err := snap.Table(t.name[0], t.name[1], t.columns)
		if err != nil {
			return done, err
		}
		rows, err := tx.Query(ctx, t.selectSQL(s.cfg.Columns.ID, where), pgx.QueryResultFormats{pgx.TextFormatCode})
		if err != nil {
			return done, fmt.Errorf("reading %s: %w", t.name.Sanitize(), err)
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
	return done, s.apply(ctx, lay, commit)
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

// apply hands one backfilled message to the pump as the stream would: a
// row that cannot become a record is dead-lettered or a permanent error.
func (s *Streamer) apply(ctx context.Context, lay *layout.Layout, m decode.Message) error {
	c, err := change(lay, &m)
	var re *outbox.RowError
	switch {
	case errors.As(err, &re):
		return s.pump.Reject(ctx, re)
	case err != nil:
		return err
	}
	return s.pump.Apply(ctx, c)
}

// ErrBackfillUnordered: a table of the publication has nothing that tells
// the order its rows were written in, so a backfill would publish each
// key's rows out of order (issue 37). Refused before anything is published.
var ErrBackfillUnordered = errors.New("the backfill cannot publish each key's rows in the order they were written")

// backfillTables lists the publication's tables with the column each is
// read in order of (backfillOrder): an error, permanent, when the
// publication has none or one cannot be ordered.
func (s *Streamer) backfillTables(ctx context.Context, q querier) ([]backfillTable, error) {
	tables, err := publicationTables(ctx, q, s.cfg.Publication)
	if err != nil {
		return nil, err
	}
	if len(tables) == 0 {
		return nil, fmt.Errorf("%w: publication %s covers no tables: nothing to backfill from", slot.ErrTableUnusable, s.cfg.Publication)
	}
	var errs []error
	for i := range tables {
		cols, err := tableColumns(ctx, q, tables[i].name)
		if err != nil {
			return nil, err
		}
		if tables[i].order, err = backfillOrder(tables[i].name.Sanitize(), cols, s.cfg.Columns.ID, s.cfg.Columns.Timestamp, s.cfg.BackfillOrderColumn); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, permanent(fmt.Errorf("choosing the order of each table's backfill (nothing was published): %w", errors.Join(errs...)))
	}
	return tables, nil
}

// querier is what the catalog reads need: a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// tableColumn is a column of a table as backfillOrder weighs it.
type tableColumn struct {
	name    string
	typeOID uint32
	// sequence: an identity column, or one whose default is nextval(...)
	// (serial, bigserial), on the table or on a partitioned table it is a
	// partition of (an insert through the root takes the root's default).
	sequence bool
}

// tableColumns reads every column of a table, published or not (a column
// list may leave the ordering column out; ORDER BY can still read it).
func tableColumns(ctx context.Context, q querier, table pgx.Identifier) ([]tableColumn, error) {
	rows, err := q.Query(ctx, `SELECT a.attname, a.atttypid::int8,
			EXISTS (SELECT 1 FROM (SELECT c.oid AS relid UNION SELECT relid FROM pg_catalog.pg_partition_ancestors(c.oid)) r
				JOIN pg_catalog.pg_attribute p ON p.attrelid = r.relid AND p.attname = a.attname AND NOT p.attisdropped
				LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = p.attrelid AND d.adnum = p.attnum
				WHERE p.attidentity <> '' OR pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%')
		FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE n.nspname = $1 AND c.relname = $2
		ORDER BY a.attnum`, table[0], table[1])
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s to order its backfill: %w", table.Sanitize(), err)
	}
	var cols []tableColumn
	var c tableColumn
	var oid int64
	if _, err := pgx.ForEachRow(rows, []any{&c.name, &oid, &c.sequence}, func() error {
		c.typeOID = uint32(oid)
		cols = append(cols, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading the columns of %s to order its backfill: %w", table.Sanitize(), err)
	}
	return cols, nil
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
const orderHelp = "name a column that holds the order rows are written in with --backfill-order-column " +
	"(timestamptz, timestamp, bigint, integer or smallint, e.g. DEFAULT clock_timestamp() or a bigserial; ties are broken by the id column)"

// backfillOrder chooses the column a table's backfill is read in order
// of, so that each key's rows are published in the order they were
// written (a key's rows are all in one table: keys are per table). The
// rule, in this order:
//
//  1. orderColumn (--backfill-order-column), when given: every table must
//     have it, of a type in orderTypes.
//  2. The id column, when it is an integer filled from a sequence
//     (identity, serial, bigserial: the default table): a sequence's
//     values are taken in insert order, and a key's rows are written by
//     one writer at a time.
//  3. timestampColumn (--timestamp-column), when the table has it, a
//     timestamptz or timestamp.
//
// Anything else (a uuid, text or varchar id, an integer id the
// application assigns) is an error wrapping ErrBackfillUnordered. The
// rows are read ORDER BY <column> NULLS LAST, <id>; for rule 2 just id.
func backfillOrder(table string, cols []tableColumn, idColumn, timestampColumn, orderColumn string) (string, error) {
	find := func(name string) (tableColumn, bool) {
		for _, c := range cols {
			if c.name == name {
				return c, true
			}
		}
		return tableColumn{}, false
	}
	if orderColumn != "" {
		c, ok := find(orderColumn)
		if !ok {
			return "", fmt.Errorf("%w: table %s has no column %q (--backfill-order-column)", ErrBackfillUnordered, table, orderColumn)
		}
		if _, ok := orderTypes[c.typeOID]; !ok {
			return "", fmt.Errorf("%w: table %s: ordering column %q (--backfill-order-column) has %s, want timestamptz, timestamp, bigint, integer or smallint",
				ErrBackfillUnordered, table, orderColumn, describeOID(c.typeOID))
		}
		return orderColumn, nil
	}
	id, ok := find(idColumn)
	if !ok {
		return "", fmt.Errorf("%w: table %s has no id column %q", ErrBackfillUnordered, table, idColumn)
	}
	isInt := id.typeOID == pgtype.Int8OID || id.typeOID == pgtype.Int4OID || id.typeOID == pgtype.Int2OID
	if isInt && id.sequence {
		return idColumn, nil
	}
	if timestampColumn != "" {
		if c, ok := find(timestampColumn); ok && (c.typeOID == pgtype.TimestamptzOID || c.typeOID == pgtype.TimestampOID) {
			return timestampColumn, nil
		}
	}
	why := fmt.Sprintf("its id column %q has %s, which does not sort in the order rows are written", idColumn, describeOID(id.typeOID))
	if isInt {
		why = fmt.Sprintf("its id column %q is an integer not filled from a sequence (no identity, no DEFAULT nextval(...)), so it need not sort in the order rows are written", idColumn)
	}
	ts := "no --timestamp-column is given"
	if timestampColumn != "" {
		ts = fmt.Sprintf("the table has no timestamptz or timestamp column %q (--timestamp-column)", timestampColumn)
	}
	return "", fmt.Errorf("%w: table %s: %s, and %s: %s",
		ErrBackfillUnordered, table, why, ts, orderHelp)
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

// backfillTable is a table of the publication: its published columns, its
// row filter (PostgreSQL 15+ publications may have both) and the column
// its rows are read in order of.
type backfillTable struct {
	name      pgx.Identifier // schema, table
	columns   []outbox.Column
	rowFilter string // "" when none
	order     string // the ordering column (backfillOrder); the id column when it orders by itself
}

// filter is the WHERE clause: the publication's row filter and the predicate.
func (t backfillTable) filter(where string) string {
	if t.rowFilter == "" {
		return "(" + where + ")"
	}
	return "(" + t.rowFilter + ") AND (" + where + ")"
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
	return "SELECT count(*), " + unordered + " FROM " + t.name.Sanitize() + " WHERE " + t.filter(where)
}

// selectSQL reads the published columns (text format, as pgoutput sends
// them) of the matching rows in the order they were written (orderBy).
func (t backfillTable) selectSQL(idColumn, where string) string {
	list := ""
	for i, c := range t.columns {
		if i > 0 {
			list += ", "
		}
		list += sqlquote.Identifier(c.Name)
	}
	return "SELECT " + list + " FROM " + t.name.Sanitize() + " WHERE " + t.filter(where) + " ORDER BY " + t.orderBy(idColumn)
}

// publicationTables lists the publication's tables with the columns it
// publishes (no dropped or generated columns, only those of a column list)
// in table order, and their row filters.
func publicationTables(ctx context.Context, tx querier, publication string) ([]backfillTable, error) {
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
		t.columns = append(t.columns, outbox.Column{Name: column, TypeOID: uint32(oid), TypeMod: mod})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the tables of publication %s: %w", publication, err)
	}
	return tables, nil
}
