package cdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/slot"
)

// replayTable is the table a replay reads, with what its SQL needs.
type replayTable struct {
	backfillTable
	oid               uint32
	orderType, idType string // format_type of the ordering column and of the id
	timestamp         string // the timestamp column (Since, Until)
}

// idOrders reports whether the id orders by itself.
func (t *replayTable) idOrders() bool { return t.order == "" || t.order == t.id }

// table reads the table to replay from the publication, with the column
// it is read in order of.
func (r *Replayer) table(ctx context.Context, conn *pgx.Conn) (*replayTable, error) {
	all, err := slot.ReadPublication(ctx, conn, r.cfg.Publication)
	if err != nil {
		return nil, err
	}
	var chosen *slot.Table
	var names []string
	var oid uint32
	if r.cfg.Table != "" {
		var schema, name string
		err := conn.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = pg_catalog.to_regclass($1)`, r.cfg.Table).Scan(&oid, &schema, &name)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: table %s does not exist", ErrReplayRefused, r.cfg.Table)
		}
		if err != nil {
			return nil, fmt.Errorf("looking up table %s: %w", r.cfg.Table, err)
		}
		for i := range all {
			if all[i].Name[0] == schema && all[i].Name[1] == name {
				chosen = &all[i]
			}
		}
	} else if len(all) == 1 {
		chosen = &all[0]
	}
	for _, t := range all {
		names = append(names, t.Name.Sanitize())
	}
	switch {
	case chosen == nil && r.cfg.Table != "":
		return nil, fmt.Errorf("%w: table %s is not in publication %s (it publishes %s): its rows were never the stream's",
			ErrReplayRefused, r.cfg.Table, r.cfg.Publication, orNoTables(names))
	case chosen == nil:
		return nil, fmt.Errorf("%w: publication %s publishes %s: name the table to replay (%s)",
			ErrReplayRefused, r.cfg.Publication, orNoTables(names), r.cfg.Names.Of("Table"))
	}
	if oid == 0 {
		if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1)::oid`, chosen.Name.Sanitize()).Scan(&oid); err != nil {
			return nil, fmt.Errorf("looking up table %s: %w", chosen.Name.Sanitize(), err)
		}
	}
	m := r.cfg.Columns.For(chosen.Name[0], chosen.Name[1]).WithDefaults()
	t := &replayTable{backfillTable: backfillTable{Table: *chosen, id: m.ID}, oid: oid, timestamp: m.Timestamp}
	if t.order, err = backfillOrder(chosen.Name.Sanitize(), chosen.Columns, m.ID, m.Timestamp, r.cfg.BackfillOrderColumn, r.cfg.Names); err != nil {
		return nil, fmt.Errorf("%w: choosing the order to replay in: %w", ErrReplayRefused, err)
	}
	typeOf := func(col string) (string, error) {
		var typ string
		err := conn.QueryRow(ctx, `SELECT pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute
			WHERE attrelid = $1 AND attname = $2 AND NOT attisdropped`, oid, col).Scan(&typ)
		if err != nil {
			return "", fmt.Errorf("reading the type of column %s of %s: %w", col, chosen.Name.Sanitize(), err)
		}
		return typ, nil
	}
	if t.idType, err = typeOf(m.ID); err != nil {
		return nil, err
	}
	if !t.idOrders() {
		if t.orderType, err = typeOf(t.order); err != nil {
			return nil, err
		}
	}
	if !r.cfg.Selection.Since.IsZero() || !r.cfg.Selection.Until.IsZero() {
		if t.timestamp, err = timeColumn(chosen, m.Timestamp); err != nil {
			return nil, fmt.Errorf("%w: table %s: %w (%s)", ErrReplayRefused, chosen, err, r.cfg.Names.Of("Columns.Timestamp"))
		}
	}
	return t, nil
}

// defaultTimeColumn is the default table's time column, which a time
// range selects by when no timestamp column is given.
const defaultTimeColumn = "created_at"

// timeColumn is the column Since and Until select by: the mapping's
// timestamp column, else created_at; it must be a timestamptz or timestamp.
func timeColumn(t *slot.Table, timestamp string) (string, error) {
	name := timestamp
	if name == "" {
		name = defaultTimeColumn
	}
	for _, c := range t.Columns {
		if c.Name == name {
			if c.TypeOID != pgtype.TimestamptzOID && c.TypeOID != pgtype.TimestampOID {
				return "", fmt.Errorf("column %q has %s, want timestamptz or timestamp to select a time range by", name, describeOID(c.TypeOID))
			}
			return name, nil
		}
	}
	if timestamp == "" {
		return "", fmt.Errorf("no column %q to select a time range by: name the table's time column", name)
	}
	return "", fmt.Errorf("no timestamp column %q to select a time range by", name)
}

func orNoTables(names []string) string {
	if len(names) == 0 {
		return "no table"
	}
	return strings.Join(names, ", ")
}

// orderExpr is the ordering column, quoted.
func (t *replayTable) orderExpr() string { return sqlquote.Identifier(t.order) }

// orderColumn is the column rows are read in order of, quoted, and its
// type: the id when it orders by itself.
func (t *replayTable) orderColumn() (expr, typ string) {
	if t.idOrders() {
		return t.idExpr(), t.idType
	}
	return t.orderExpr(), t.orderType
}

// idExpr is the id column, quoted.
func (t *replayTable) idExpr() string { return sqlquote.Identifier(t.id) }

// selection is the WHERE clause of the rows the replay selects (the
// publication's row filter, the bounds, the predicate), and its arguments.
func (r *Replayer) selection(t *replayTable) (string, []any) {
	s := r.cfg.Selection
	conds := []string{"true"}
	if t.RowFilter != "" {
		conds = append(conds, "("+t.RowFilter+")")
	}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	col, typ := t.orderColumn()
	if s.From != "" {
		conds = append(conds, col+" >= "+arg(s.From)+"::text::"+typ)
	}
	if s.To != "" {
		conds = append(conds, col+" <= "+arg(s.To)+"::text::"+typ)
	}
	ts := sqlquote.Identifier(t.timestamp)
	if !s.Since.IsZero() {
		conds = append(conds, ts+" >= "+arg(s.Since))
	}
	if !s.Until.IsZero() {
		conds = append(conds, ts+" < "+arg(s.Until))
	}
	if s.Where != "" {
		conds = append(conds, "("+s.Where+")")
	}
	return strings.Join(conds, " AND "), args
}

// cursorCond is the condition of the rows after c (after) or at or before
// it (!after) in (ordering column, id) order, NULLs of the ordering
// column last; its arguments are appended to args.
func (t *replayTable) cursorCond(c slot.Cursor, after bool, args *[]any) string {
	arg := func(v string, typ string) string {
		*args = append(*args, v)
		return "$" + strconv.Itoa(len(*args)) + "::text::" + typ
	}
	id := t.idExpr()
	if t.idOrders() {
		if after {
			return id + " > " + arg(c.ID, t.idType)
		}
		return id + " <= " + arg(c.ID, t.idType)
	}
	o := t.orderExpr()
	switch {
	case after && c.OrderNull:
		return "(" + o + " IS NULL AND " + id + " > " + arg(c.ID, t.idType) + ")"
	case after:
		ov := arg(c.Order, t.orderType)
		return "(" + o + " > " + ov + " OR (" + o + " = " + ov + " AND " + id + " > " + arg(c.ID, t.idType) + ") OR " + o + " IS NULL)"
	case c.OrderNull:
		return "(" + o + " IS NOT NULL OR " + id + " <= " + arg(c.ID, t.idType) + ")"
	default:
		ov := arg(c.Order, t.orderType)
		return "(" + o + " < " + ov + " OR (" + o + " = " + ov + " AND " + id + " <= " + arg(c.ID, t.idType) + "))"
	}
}

// cursorCols reads a row's cursor: the ordering column and the id as text.
func (t *replayTable) cursorCols() string {
	// Named apart: ORDER BY a column's name must find only the column.
	if t.idOrders() {
		return "NULL::text AS outboxd_cursor_order, " + t.idExpr() + "::text AS outboxd_cursor_id"
	}
	return t.orderExpr() + "::text AS outboxd_cursor_order, " + t.idExpr() + "::text AS outboxd_cursor_id"
}

// checkWhere refuses a predicate that reads any table but the replayed
// one (and its partitions): the plan of the selection names every
// relation it reads. A predicate that writes is refused by PostgreSQL
// itself, as every page is read in a read-only transaction.
func (r *Replayer) checkWhere(ctx context.Context, conn *pgx.Conn, t *replayTable, where string, args []any) error {
	if r.cfg.Selection.Where == "" {
		return nil
	}
	var plan []byte
	err := readOnly(ctx, conn, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "EXPLAIN (VERBOSE, FORMAT JSON) SELECT 1 FROM "+t.Name.Sanitize()+" WHERE "+where, args...).Scan(&plan)
	})
	if err != nil {
		return fmt.Errorf("%w: the selection does not hold (%s): %w", ErrReplayRefused, r.cfg.Names.Of("Selection.Where"), err)
	}
	rels, err := planRelations(plan)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrReplayRefused, err)
	}
	var foreign []string
	for _, rel := range rels {
		var ok bool
		err := conn.QueryRow(ctx, `SELECT coalesce(r = $3::oid::regclass OR r IN (SELECT relid FROM pg_catalog.pg_partition_tree($3::oid::regclass)), false)
			FROM pg_catalog.to_regclass(pg_catalog.format('%I.%I', $1::text, $2::text)) r`, rel[0], rel[1], t.oid).Scan(&ok)
		if err != nil {
			return fmt.Errorf("checking the relations the selection reads: %w", err)
		}
		if !ok {
			foreign = append(foreign, rel[0]+"."+rel[1])
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("%w: the predicate (%s) reads %s: a replay's predicate may read only the table it replays",
			ErrReplayRefused, r.cfg.Names.Of("Selection.Where"), strings.Join(foreign, ", "))
	}
	return nil
}

// planRelations lists the (schema, relation) of every node of an EXPLAIN
// (VERBOSE, FORMAT JSON) plan that reads one.
func planRelations(plan []byte) ([][2]string, error) {
	var doc []struct{ Plan map[string]any }
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) == 0 {
		return nil, fmt.Errorf("reading the plan of the selection to tell which tables it reads: %q is no plan", plan)
	}
	var out [][2]string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if rel, ok := n["Relation Name"].(string); ok {
			schema, _ := n["Schema"].(string)
			out = append(out, [2]string{schema, rel})
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				if m, ok := k.(map[string]any); ok {
					walk(m)
				}
			}
		}
	}
	for _, d := range doc {
		walk(d.Plan)
	}
	return out, nil
}

// readOnly runs f in a read-only transaction on conn.
func readOnly(ctx context.Context, conn *pgx.Conn, f func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, f)
}
