package cdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"golang.org/x/time/rate"

	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// Replayer re-publishes rows still in an outbox table (outboxd replay):
// the rows a Selection names, each key's in the order they were written
// (the backfill's order), laid out as the stream lays them out, with the
// header ReplayHeader added. It never touches a slot.
//
// Invariants:
//   - The rows are read in pages, each its own read-only transaction, in
//     (ordering column, id) order; page k is handed on as one transaction
//     whose events take positions (k, i), so an exactly-once sink resumes
//     inside it and skips what a committed Kafka transaction holds.
//   - outboxd_replays records a page only once Kafka acknowledged it and
//     every page before it (the window's watermark): a replay stopped at
//     any point resumes after the last such page, and sends again at most
//     what was in flight.
//   - The selection is frozen when the replay starts: rows written later
//     (whose order sorts after its last row) are the stream's.
//   - Two replays of one table never run at once (an advisory lock on the
//     catalog's server, held by this Replayer's session).
type Replayer struct {
	cfg ReplayConfig
	out outbox.Stage
	win Window
	log *slog.Logger

	done, total, acked atomic.Int64
	remains            atomic.Pointer[string]
}

// NewReplayer returns a Replayer handing its changes to out, whose records
// win tracks (the pump).
func NewReplayer(cfg ReplayConfig, out outbox.Stage, win Window, log *slog.Logger) (*Replayer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Replayer{cfg: cfg.WithDefaults(), out: out, win: win, log: log}, nil
}

// ReplayProgress is how far a replay got: rows handed on in this run and
// before it, rows Kafka acknowledged, rows the selection holds; Table and
// Remains say which rows the table still holds when the selection reaches
// below them (pruned).
type ReplayProgress struct {
	Name               string
	Done, Acked, Total int64
	Remains            string
}

// Progress returns the replay's progress; safe from any goroutine.
func (r *Replayer) Progress() ReplayProgress {
	p := ReplayProgress{Name: r.cfg.Name, Done: r.done.Load(), Acked: r.acked.Load(), Total: r.total.Load()}
	if s := r.remains.Load(); s != nil {
		p.Remains = *s
	}
	return p
}

// ErrReplayRefused is matched by the errors of a replay refused before it
// published anything: another replay of the table runs, the name was used
// for another selection, the predicate reads another table.
var ErrReplayRefused = errors.New("replay refused")

// replayTable is the table a replay reads, with what its SQL needs.
type replayTable struct {
	backfillTable
	oid               uint32
	orderType, idType string // format_type of the ordering column and of the id
	timestamp         string // the timestamp column (Since, Until)
}

// idOrders reports whether the id orders by itself.
func (t *replayTable) idOrders() bool { return t.order == "" || t.order == t.id }

// Run replays until every selected row is acknowledged, ctx ends (a
// stop: what Kafka acknowledged is recorded, and the same replay resumes
// there), or a failure. Its errors wrap ErrReplayRefused when nothing was
// published.
func (r *Replayer) Run(ctx context.Context) error {
	conn, err := slot.Connect(ctx, r.cfg.DatabaseURL, "outboxd replay")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var inRecovery bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&inRecovery); err != nil {
		return fmt.Errorf("asking whether the server is in recovery: %w", err)
	}
	catalog, closeCatalog, err := slot.Catalog(ctx, conn, inRecovery, r.cfg.PrimaryURL, "outboxd replay")
	if err != nil {
		return err
	}
	defer closeCatalog()
	t, err := r.table(ctx, conn)
	if err != nil {
		return err
	}
	name := r.cfg.Name
	where, args := r.selection(t)
	if err := r.checkWhere(ctx, conn, t, where, args); err != nil {
		return err
	}
	if !r.cfg.DryRun {
		held, pid, err := slot.LockReplays(ctx, catalog, t.oid)
		if err != nil {
			return err
		}
		if !held {
			return fmt.Errorf("%w: another replay of table %s runs (backend pid %d holds its lock): two replays of one table at once are refused; wait for it, or stop it (it resumes later)",
				ErrReplayRefused, t, pid)
		}
	}
	rec, found, err := slot.ReadReplay(ctx, catalog, name)
	if err != nil {
		return err
	}
	describe := r.cfg.Describe()
	switch {
	case found && (rec.Table != t.Name.Sanitize() || rec.Selection != describe):
		return fmt.Errorf("%w: replay %s was started on table %s selecting %q, not on %s selecting %q: give this replay another name (%s)",
			ErrReplayRefused, name, rec.Table, rec.Selection, t.Name.Sanitize(), describe, r.cfg.Names.Of("Name"))
	case found && rec.Finished != nil:
		r.total.Store(rec.RowsTotal)
		r.acked.Store(rec.RowsDone)
		r.log.Info("replay finished before: nothing to do (give another name to replay the rows again)",
			"replay", name, "finished_at", rec.Finished.UTC(), "rows", rec.RowsDone)
		return nil
	case !found:
		if rec, err = r.plan(ctx, conn, t, where, args, name, describe); err != nil {
			return err
		}
		if r.cfg.DryRun {
			return nil
		}
		if err := slot.StartReplay(ctx, catalog, rec); err != nil {
			return err
		}
		r.log.Info("replay started", "replay", name, "table", t.Name.Sanitize(), "selection", describe, "rows_total", rec.RowsTotal)
	default:
		r.total.Store(rec.RowsTotal)
		r.acked.Store(rec.RowsDone)
		if r.cfg.DryRun {
			n, err := r.count(ctx, conn, t, where, args, rec.Upper, &rec.After, rec.Page > 0)
			if err != nil {
				return err
			}
			r.total.Store(rec.RowsDone + n)
			return nil
		}
		r.log.Info("replay resumed", "replay", name, "table", t.Name.Sanitize(), "after_page", rec.Page, "rows_done", rec.RowsDone, "rows_total", rec.RowsTotal)
	}
	if rec.Upper.ID == "" { // the selection held nothing
		return slot.ReplayAcknowledged(ctx, catalog, name, 0, slot.Cursor{}, 0, true)
	}
	return r.replay(ctx, conn, catalog, t, where, args, rec)
}

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
	col, typ := t.idExpr(), t.idType
	if !t.idOrders() {
		col, typ = t.orderExpr(), t.orderType
	}
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
	rels := planRelations(plan)
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
func planRelations(plan []byte) [][2]string {
	var doc []struct{ Plan map[string]any }
	if json.Unmarshal(plan, &doc) != nil {
		return nil
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
	return out
}

// readOnly runs f in a read-only transaction on conn.
func readOnly(ctx context.Context, conn *pgx.Conn, f func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, f)
}

// plan counts the selection and finds its last row (the replay's upper
// bound), and what the table still holds when the selection's lower bound
// lies below its first row (pruned rows are gone).
func (r *Replayer) plan(ctx context.Context, conn *pgx.Conn, t *replayTable, where string, args []any, name, describe string) (slot.Replay, error) {
	rec := slot.Replay{Name: name, Table: t.Name.Sanitize(), Selection: describe}
	err := readOnly(ctx, conn, func(tx pgx.Tx) error {
		q := "SELECT " + t.cursorCols() + " FROM " + t.Name.Sanitize() + " WHERE " + where +
			" ORDER BY " + t.orderBy(t.id) + " DESC LIMIT 1"
		if !t.idOrders() { // DESC of "o NULLS LAST, id": NULLs first, then the highest
			q = "SELECT " + t.cursorCols() + " FROM " + t.Name.Sanitize() + " WHERE " + where +
				" ORDER BY " + t.orderExpr() + " DESC NULLS FIRST, " + t.idExpr() + " DESC LIMIT 1"
		}
		var order *string
		err := tx.QueryRow(ctx, q, args...).Scan(&order, &rec.Upper.ID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("finding the last row the selection holds: %w", err)
		}
		rec.Upper.Order = deref(order)
		rec.Upper.OrderNull = order == nil && !t.idOrders()
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+t.Name.Sanitize()+" WHERE "+where, args...).Scan(&rec.RowsTotal); err != nil {
			return fmt.Errorf("counting the rows the selection holds: %w", err)
		}
		return nil
	})
	if err != nil {
		return slot.Replay{}, err
	}
	r.total.Store(rec.RowsTotal)
	if err := r.checkPruned(ctx, conn, t); err != nil {
		return slot.Replay{}, err
	}
	if rec.RowsTotal == 0 {
		r.log.Warn("the selection holds no rows: nothing to replay", "replay", name, "table", t.Name.Sanitize(), "selection", describe)
	}
	return rec, nil
}

// checkPruned says which rows the table still holds when the selection's
// lower bound (From, Since) lies below its first row: the rows before
// were pruned, and cannot be replayed.
func (r *Replayer) checkPruned(ctx context.Context, conn *pgx.Conn, t *replayTable) error {
	s := r.cfg.Selection
	if s.From == "" && s.Since.IsZero() {
		return nil
	}
	col, typ := t.idExpr(), t.idType
	if !t.idOrders() {
		col, typ = t.orderExpr(), t.orderType
	}
	ts := sqlquote.Identifier(t.timestamp)
	var first, last, firstTS, lastTS *string
	var below bool
	q := "SELECT min(" + col + ")::text, max(" + col + ")::text, "
	args := []any{}
	if s.From != "" {
		args = append(args, s.From)
		q += "coalesce($1::text::" + typ + " < min(" + col + "), false)"
	} else {
		q += "false"
	}
	if s.Since.IsZero() {
		q += ", NULL::text, NULL::text"
	} else {
		args = append(args, s.Since)
		q += ", min(" + ts + ")::text, max(" + ts + ")::text, coalesce($" + strconv.Itoa(len(args)) + " < min(" + ts + "), false)"
	}
	q += " FROM " + t.Name.Sanitize()
	var belowTS bool
	dest := []any{&first, &last, &below, &firstTS, &lastTS}
	if !s.Since.IsZero() {
		dest = append(dest, &belowTS)
	}
	if err := conn.QueryRow(ctx, q, args...).Scan(dest...); err != nil {
		return fmt.Errorf("reading the range the table holds: %w", err)
	}
	if !below && !belowTS {
		return nil
	}
	what := "no rows at all"
	if first != nil {
		what = fmt.Sprintf("%s %s to %s", strings.Trim(col, `"`), deref(first), deref(last))
		if firstTS != nil {
			what += fmt.Sprintf(" (%s %s to %s)", strings.Trim(ts, `"`), deref(firstTS), deref(lastTS))
		}
	}
	r.remains.Store(&what)
	r.log.Warn("the selection reaches below the table's first row: rows pruned from the table cannot be replayed; the table holds "+what,
		"table", t.Name.Sanitize())
	return nil
}

// count counts the selected rows after the cursor and at or before upper.
func (r *Replayer) count(ctx context.Context, conn *pgx.Conn, t *replayTable, where string, args []any, upper slot.Cursor, after *slot.Cursor, resumed bool) (int64, error) {
	args = append([]any(nil), args...)
	q := "SELECT count(*) FROM " + t.Name.Sanitize() + " WHERE " + where + " AND " + t.cursorCond(upper, false, &args)
	if resumed {
		q += " AND " + t.cursorCond(*after, true, &args)
	}
	var n int64
	err := readOnly(ctx, conn, func(tx pgx.Tx) error { return tx.QueryRow(ctx, q, args...).Scan(&n) })
	if err != nil {
		return 0, fmt.Errorf("counting the rows left to replay: %w", err)
	}
	return n, nil
}

// handedPage is a page handed on, not yet recorded as acknowledged.
type handedPage struct {
	page  int64
	last  slot.Cursor
	rows  int64 // the replay's rows up to and with this page
	final bool
}

// replayRecordEvery is how often acknowledged pages are recorded.
const replayRecordEvery = 200 * time.Millisecond

// replay reads and hands on the pages after rec's, recording what Kafka
// acknowledged as it goes and once at the end.
func (r *Replayer) replay(ctx context.Context, conn, catalog *pgx.Conn, t *replayTable, where string, args []any, rec slot.Replay) error {
	cols := r.cfg.Columns
	if r.cfg.Source != "" {
		cols.Source = r.cfg.Source
	} else {
		id, err := slot.Identify(ctx, r.cfg.DatabaseURL)
		if err != nil {
			return fmt.Errorf("identifying the server for the records' source: %w", err)
		}
		cols.Source = id.SystemID + "/" + layout.SourceName(id.Database)
	}
	lay := layout.New(cols)
	var limit *rate.Limiter
	if r.cfg.Rate > 0 {
		limit = rate.NewLimiter(rate.Limit(r.cfg.Rate), r.cfg.PageRows)
	}
	r.win.Start(outbox.LSN(rec.Page + 1))
	var pending []handedPage
	recorded := handedPage{page: rec.Page, last: rec.After, rows: rec.RowsDone}
	lastRecord := time.Now()
	// record saves the last page whose records and every earlier page's
	// Kafka acknowledged.
	record := func(ctx context.Context) error {
		flushed := int64(r.win.Flushed())
		n := 0
		for n < len(pending) && pending[n].page+1 <= flushed {
			n++
		}
		if n == 0 {
			return nil
		}
		p := pending[n-1]
		pending = pending[n:]
		if err := slot.ReplayAcknowledged(ctx, catalog, rec.Name, p.page, p.last, p.rows, p.final); err != nil {
			return err
		}
		recorded = p
		r.acked.Store(p.rows)
		return nil
	}
	page, after, rows := rec.Page, rec.After, rec.RowsDone
	r.done.Store(rows)
	lastLog := time.Now()
	var readErr error
	for ctx.Err() == nil {
		if limit != nil {
			// A page's worth before each page, never inside its
			// transaction: pages are as long at any rate, which an
			// exactly-once replay's positions (page, index) rely on
			// when it resumes.
			if err := limit.WaitN(ctx, r.cfg.PageRows); err != nil {
				break
			}
		}
		n, last, err := r.page(ctx, conn, t, where, args, rec.Upper, after, page > 0, page+1, lay)
		if err != nil {
			if ctx.Err() == nil {
				readErr = err
			}
			break
		}
		if n == 0 {
			break
		}
		page, after, rows = page+1, last, rows+int64(n)
		pending = append(pending, handedPage{page: page, last: after, rows: rows})
		if time.Since(lastRecord) >= replayRecordEvery {
			lastRecord = time.Now()
			if err := record(ctx); err != nil {
				readErr = err
				break
			}
		}
		if time.Since(lastLog) >= backfillLogInterval {
			lastLog = time.Now()
			r.log.Info("replaying", "replay", rec.Name, "rows_done", rows, "rows_acknowledged", r.acked.Load(), "rows_total", r.total.Load())
		}
	}
	complete := readErr == nil && ctx.Err() == nil
	if complete && len(pending) > 0 {
		pending[len(pending)-1].final = true
	}
	// What was handed on is waited for, also on a stop: its progress is
	// recorded, and the next run sends less again.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	drainErr := r.win.Drain(dctx)
	if drainErr == nil {
		drainErr = r.win.Err()
	}
	recErr := record(dctx)
	switch {
	case readErr != nil:
		return errors.Join(readErr, recErr)
	case drainErr != nil:
		return fmt.Errorf("waiting for Kafka to acknowledge the replay (recorded up to page %d): %w", recorded.page, errors.Join(drainErr, recErr))
	case recErr != nil:
		return recErr
	case !complete:
		r.log.Info("replay stopped: run it again to resume", "replay", rec.Name, "after_page", recorded.page, "rows_acknowledged", recorded.rows, "rows_total", r.total.Load())
		return nil
	case len(pending) > 0 || recorded.page != page:
		return fmt.Errorf("the replay's last page %d is not acknowledged (watermark %s)", page, r.win.Flushed())
	}
	if page == rec.Page { // resumed with nothing left: mark it finished
		if err := slot.ReplayAcknowledged(dctx, catalog, rec.Name, page, after, rows, true); err != nil {
			return err
		}
	}
	r.log.Info("replay finished", "replay", rec.Name, "rows", rows, "pages", page)
	return nil
}

// page reads the rows after the cursor (all from the start when !resumed)
// up to upper, at most PageRows, in one read-only transaction, and hands
// them on as transaction number page. It returns how many, and the last's
// cursor.
func (r *Replayer) page(ctx context.Context, conn *pgx.Conn, t *replayTable, where string, args []any, upper, after slot.Cursor, resumed bool,
	page int64, lay *layout.Layout) (int, slot.Cursor, error) {
	args = append([]any(nil), args...)
	q := "SELECT "
	for i, c := range t.Published() {
		if i > 0 {
			q += ", "
		}
		q += sqlquote.Identifier(c.Name)
	}
	q += ", " + t.cursorCols() + " FROM " + t.Name.Sanitize() + " WHERE " + where + " AND " + t.cursorCond(upper, false, &args)
	if resumed {
		q += " AND " + t.cursorCond(after, true, &args)
	}
	q += " ORDER BY " + t.orderBy(t.id) + " LIMIT " + strconv.Itoa(r.cfg.PageRows)
	var (
		n    int
		last slot.Cursor
	)
	published := t.Published()
	err := readOnly(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, q, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
		if err != nil {
			return fmt.Errorf("reading %s: %w", t.Name.Sanitize(), err)
		}
		defer rows.Close()
		var snap *decode.Snapshot
		var rel uint32
		for rows.Next() {
			raw := rows.RawValues()
			if snap == nil {
				s, begin, err := decode.NewSnapshot(outbox.LSN(page+1), time.Now())
				if err != nil {
					return err
				}
				if err := r.apply(ctx, lay, begin); err != nil {
					return err
				}
				if rel, err = s.Table(t.Name[0], t.Name[1], published); err != nil {
					return err
				}
				snap = s
			}
			m, err := snap.Row(rel, raw[:len(published)])
			if err == nil {
				err = r.apply(ctx, lay, m)
			}
			if err != nil {
				return err
			}
			n++
			r.done.Add(1)
			o := raw[len(published)]
			last = slot.Cursor{Order: string(o), OrderNull: o == nil && !t.idOrders(), ID: string(raw[len(published)+1])}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading %s: %w", t.Name.Sanitize(), err)
		}
		if snap == nil {
			return nil
		}
		commit, err := snap.Commit()
		if err != nil {
			return err
		}
		return r.apply(ctx, lay, commit)
	})
	return n, last, err
}

// apply hands one replayed message on as the backfill does, each record
// with the replay's header and, when given, the one topic.
func (r *Replayer) apply(ctx context.Context, lay *layout.Layout, m decode.Message) error {
	return handOn(ctx, r.out, lay, m, func(ev *outbox.Event) {
		if r.cfg.Topic != "" {
			ev.Topic = r.cfg.Topic
		}
		ev.Headers = append(ev.Headers, outbox.Header{Key: ReplayHeader, Value: []byte(r.cfg.Name)})
	})
}

// deref is *s, "" for nil (a NULL read as text).
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
