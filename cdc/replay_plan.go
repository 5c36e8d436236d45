package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/slot"
)

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
	col, typ := t.orderColumn()
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
