package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
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
	// A replay's scans (the count of what it selects above all) run on
	// one core: parallel workers would take every core from the server's
	// other work, the stream beside the replay first.
	if _, err := conn.Exec(ctx, `SET max_parallel_workers_per_gather = 0`); err != nil {
		return fmt.Errorf("setting up the replay's session: %w", err)
	}
	var inRecovery bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&inRecovery); err != nil {
		return fmt.Errorf("asking whether the server is in recovery: %w", err)
	}
	if inRecovery && r.cfg.PrimaryURL == "" && !r.cfg.DryRun {
		return fmt.Errorf("%w: %s reaches a standby, where outboxd_replays cannot be written: give the primary's URL as %s (the rows are still read on the standby)",
			ErrReplayRefused, r.cfg.Names.Of("DatabaseURL"), r.cfg.Names.Of("PrimaryURL"))
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
