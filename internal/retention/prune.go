package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/lib/daypart"
	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/slot"
)

// Config says what Prune removes.
type Config struct {
	// Table is the outbox table in SQL syntax (as migrate's --table).
	Table string
	// Slot is the replication slot that publishes it.
	Slot string
	// Column is a timestamptz column set at insert to at most the commit
	// time (the default table's created_at, DEFAULT now()); for a
	// partitioned table, its partition key. Default "created_at".
	Column string
	// OlderThan is the age a row must have before it may be removed.
	OlderThan time.Duration
	// RecoveryMargin is how far before the newest acknowledged commit rows
	// are kept for a recovery; zero keeps none. WithDefaults leaves it:
	// the lost slot's recovery command assumes slot.RecoveryMargin, which
	// is prune's default.
	RecoveryMargin time.Duration
	// AheadDays is how many days after today get their partition now
	// (partitioned tables). Default DefaultAheadDays.
	AheadDays int
	// BatchSize is how many rows one DELETE removes at most. Default
	// DefaultBatchSize.
	BatchSize int
	// LockTimeout bounds each wait for the lock that creating, detaching
	// or dropping a partition takes (inserts queue behind it meanwhile);
	// a timed-out attempt is retried with backoff. Default
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
}

// Defaults.
const (
	DefaultColumn      = "created_at"
	DefaultAheadDays   = 7
	DefaultBatchSize   = 5000
	DefaultLockTimeout = time.Second
)

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.Column == "" {
		c.Column = DefaultColumn
	}
	if c.AheadDays == 0 {
		c.AheadDays = DefaultAheadDays
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = DefaultLockTimeout
	}
	return c
}

// Result is what Prune did (or, with DryRun, would do).
type Result struct {
	Cutoff  time.Time
	Reason  string   // why the cutoff is that time
	Created []string // day partitions created
	Dropped []string // day partitions dropped whole
	Deleted int64    // rows deleted (from a plain table or the DEFAULT partition)
}

// Prune removes the rows the cutoff allows (see the package doc).
func Prune(ctx context.Context, conn *pgx.Conn, cfg Config, now time.Time, log *slog.Logger) (Result, error) {
	cfg = cfg.WithDefaults()
	var res Result
	table, err := sqlquote.ParseQualified(cfg.Table)
	if err != nil {
		return res, err
	}
	shape, err := readShape(ctx, conn, table, cfg.Column)
	if err != nil {
		return res, err
	}
	st, err := slot.Read(ctx, conn, cfg.Slot)
	if err != nil {
		return res, err
	}
	rec, found, err := slot.ReadRecord(ctx, conn, cfg.Slot)
	if err != nil {
		return res, err
	}
	if shape.partitioned {
		// Creating the days ahead needs no cutoff: do it even when nothing
		// may be removed.
		if res.Created, err = ensureDays(ctx, conn, cfg, table, shape, now, log); err != nil {
			return res, err
		}
	}
	// Another database's slot of that name is not this database's (slot
	// names are per server): this one's is missing.
	res.Cutoff, res.Reason, err = Cutoff(now, cfg.OlderThan, cfg.RecoveryMargin, rec, found, st.Exists && !st.OtherDatabase)
	if err != nil {
		return res, fmt.Errorf("pruning %s: nothing removed: slot %s: %w", cfg.Table, cfg.Slot, err)
	}
	log.Info("pruning", "table", cfg.Table, "slot", cfg.Slot, "cutoff", res.Cutoff.UTC().Format(time.RFC3339Nano), "reason", res.Reason, "dry_run", cfg.DryRun)
	if !shape.partitioned {
		res.Deleted, err = deleteOlder(ctx, conn, cfg, table, shape, res.Cutoff, log)
		return res, err
	}
	parts, err := daypart.List(ctx, conn, table)
	if err != nil {
		return res, err
	}
	for _, p := range parts {
		if p.End().After(res.Cutoff) {
			continue // some of its day is not before the cutoff
		}
		if !cfg.DryRun {
			if err := withLockTimeout(ctx, conn, cfg.LockTimeout, log, func() error {
				return daypart.Drop(ctx, conn, table, p, shape.defaultPart == nil)
			}); err != nil {
				return res, err
			}
		}
		log.Info("dropped partition", "table", cfg.Table, "partition", p.Name, "dry_run", cfg.DryRun)
		res.Dropped = append(res.Dropped, p.Name)
	}
	if shape.defaultPart != nil {
		n, err := deleteOlder(ctx, conn, cfg, shape.defaultPart, shape, res.Cutoff, log)
		res.Deleted += n
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// EnsurePartitioned checks that table (just migrated with --partitioned)
// is partitioned by day on created_at, and creates the partitions of
// today and the aheadDays after it. A table that existed before as a
// plain one is refused: migrate does not convert it.
func EnsurePartitioned(ctx context.Context, conn *pgx.Conn, table string, aheadDays int, now time.Time, log *slog.Logger) error {
	t, err := sqlquote.ParseQualified(table)
	if err != nil {
		return err
	}
	sh, err := readShape(ctx, conn, t, DefaultColumn)
	if err != nil {
		return err
	}
	if !sh.partitioned {
		return fmt.Errorf("table %s exists and is not partitioned: --partitioned creates a new table, it does not convert one "+
			"(create a partitioned table beside it and move the application to it, or prune this one with batched deletes)", table)
	}
	_, err = ensureDays(ctx, conn, Config{Table: table, AheadDays: aheadDays}.WithDefaults(), t, sh, now, log)
	return err
}

// shape is what Prune needs to know of the table.
type shape struct {
	partitioned bool
	defaultPart pgx.Identifier // the DEFAULT partition, nil when none
	idColumn    string         // an integer primary key column to walk in order; "" when none
}

// readShape checks the column (timestamptz; the partition key of a
// partitioned table) and finds the DEFAULT partition and an integer key.
func readShape(ctx context.Context, conn *pgx.Conn, table pgx.Identifier, column string) (shape, error) {
	var sh shape
	var kind, colType, key string
	var defSchema, defName *string
	err := conn.QueryRow(ctx, `SELECT c.relkind::text,
			coalesce((SELECT format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a
				WHERE a.attrelid = c.oid AND a.attname = $2 AND NOT a.attisdropped), ''),
			coalesce((SELECT pg_catalog.pg_get_partkeydef(c.oid)), ''),
			(SELECT n.nspname FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class p ON p.oid = i.inhrelid
				JOIN pg_catalog.pg_namespace n ON n.oid = p.relnamespace
				WHERE i.inhparent = c.oid AND p.relpartbound IS NOT NULL AND pg_catalog.pg_get_expr(p.relpartbound, p.oid) = 'DEFAULT'),
			(SELECT p.relname FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class p ON p.oid = i.inhrelid
				WHERE i.inhparent = c.oid AND p.relpartbound IS NOT NULL AND pg_catalog.pg_get_expr(p.relpartbound, p.oid) = 'DEFAULT')
		FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`, table.Sanitize(), column).Scan(&kind, &colType, &key, &defSchema, &defName)
	if err != nil {
		return sh, fmt.Errorf("reading table %s: %w", table.Sanitize(), err)
	}
	switch {
	case colType == "":
		return sh, fmt.Errorf("table %s has no column %q: give the column set at insert (--created-column)", table.Sanitize(), column)
	case colType != "timestamp with time zone":
		return sh, fmt.Errorf("table %s: column %q has type %s, want timestamp with time zone", table.Sanitize(), column, colType)
	}
	sh.partitioned = kind == "p"
	if sh.partitioned {
		if want := "RANGE (" + sqlquote.Identifier(column) + ")"; key != want && key != "RANGE ("+column+")" {
			return sh, fmt.Errorf("table %s is partitioned by %s, not by range on %q: its partitions cannot be dropped by day", table.Sanitize(), key, column)
		}
		if defName != nil {
			sh.defaultPart = pgx.Identifier{*defSchema, *defName}
		}
	}
	// An integer single-column primary key lets deletes walk the table in
	// key order instead of scanning it again for every batch (a column of
	// a composite key would not tell rows apart: the delete joins on it).
	err = conn.QueryRow(ctx, `SELECT a.attname FROM pg_catalog.pg_index i
		JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = $1::regclass AND i.indisprimary AND i.indnkeyatts = 1
		  AND a.atttypid IN ('bigint'::regtype, 'integer'::regtype, 'smallint'::regtype)`, table.Sanitize()).Scan(&key)
	switch {
	case err == nil:
		sh.idColumn = key
	case !errors.Is(err, pgx.ErrNoRows):
		return sh, fmt.Errorf("reading the primary key of %s: %w", table.Sanitize(), err)
	}
	return sh, nil
}

// ensureDays creates the partitions of today and the AheadDays after it,
// except a day some of whose rows are in the DEFAULT partition already
// (PostgreSQL refuses that partition): those rows are pruned from the
// DEFAULT partition like any others.
func ensureDays(ctx context.Context, conn *pgx.Conn, cfg Config, table pgx.Identifier, sh shape, now time.Time, log *slog.Logger) ([]string, error) {
	existing, err := daypart.List(ctx, conn, table)
	if err != nil {
		return nil, err
	}
	have := map[time.Time]bool{}
	for _, p := range existing {
		have[p.Day] = true
	}
	var created []string
	today := daypart.Day(now)
	for d := 0; d <= cfg.AheadDays; d++ {
		day := today.AddDate(0, 0, d)
		if have[day] {
			continue
		}
		if sh.defaultPart != nil {
			var stray bool
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+sh.defaultPart.Sanitize()+` WHERE `+sqlquote.Identifier(cfg.Column)+` >= $1 AND `+sqlquote.Identifier(cfg.Column)+` < $2)`,
				day, day.AddDate(0, 0, 1)).Scan(&stray); err != nil {
				return created, fmt.Errorf("reading the DEFAULT partition of %s: %w", table.Sanitize(), err)
			}
			if stray {
				log.Warn("not creating a day's partition: the DEFAULT partition holds rows of that day already (they are pruned from there)",
					"table", cfg.Table, "day", day.Format(time.DateOnly))
				continue
			}
		}
		name := daypart.Name(table, day)[len(table)-1]
		if !cfg.DryRun {
			if err := withLockTimeout(ctx, conn, cfg.LockTimeout, log, func() error {
				var err error
				name, err = daypart.Create(ctx, conn, table, day)
				return err
			}); err != nil {
				return created, err
			}
		}
		log.Info("created partition", "table", cfg.Table, "partition", name, "dry_run", cfg.DryRun)
		created = append(created, name)
	}
	return created, nil
}

// deleteOlder deletes the rows of table (a plain table or a leaf
// partition) whose column is before cutoff, at most BatchSize per
// statement, each statement its own transaction. With an integer primary
// key it walks the table in key order and stops at the first batch with
// no row before the cutoff (a later row, before the cutoff but with a
// larger key, from a transaction open for long, is kept: keeping is always
// safe); otherwise each batch searches the table.
func deleteOlder(ctx context.Context, conn *pgx.Conn, cfg Config, table pgx.Identifier, sh shape, cutoff time.Time, log *slog.Logger) (int64, error) {
	col := sqlquote.Identifier(cfg.Column)
	t := table.Sanitize()
	if cfg.DryRun {
		var n int64
		err := conn.QueryRow(ctx, `SELECT count(*) FROM `+t+` WHERE `+col+` < $1`, cutoff).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("counting the rows of %s to prune: %w", t, err)
		}
		log.Info("deleted rows", "table", t, "rows", n, "dry_run", true)
		return n, nil
	}
	var total int64
	defer func() { log.Info("deleted rows", "table", t, "rows", total, "dry_run", false) }()
	if sh.idColumn != "" && !sh.partitioned {
		id := sqlquote.Identifier(sh.idColumn)
		var after *int64
		for {
			var last *int64
			var deleted, older int64
			err := conn.QueryRow(ctx, `WITH batch AS (
					SELECT `+id+` AS id, `+col+` < $2 AS old FROM `+t+` WHERE $1::bigint IS NULL OR `+id+` > $1 ORDER BY `+id+` LIMIT $3),
				del AS (DELETE FROM `+t+` d USING batch WHERE d.`+id+` = batch.id AND batch.old RETURNING 1)
				SELECT (SELECT max(id) FROM batch), (SELECT count(*) FROM del), (SELECT count(*) FROM batch WHERE old)`,
				after, cutoff, cfg.BatchSize).Scan(&last, &deleted, &older)
			if err != nil {
				return total, fmt.Errorf("deleting old rows of %s: %w", t, err)
			}
			total += deleted
			if last == nil || older == 0 {
				return total, nil
			}
			after = last
		}
	}
	for {
		tag, err := conn.Exec(ctx, `DELETE FROM `+t+` WHERE ctid = ANY (ARRAY(SELECT ctid FROM `+t+` WHERE `+col+` < $1 LIMIT $2))`, cutoff, cfg.BatchSize)
		if err != nil {
			return total, fmt.Errorf("deleting old rows of %s: %w", t, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(cfg.BatchSize) {
			return total, nil
		}
	}
}

// withLockTimeout runs ddl with lock_timeout set, retrying with backoff
// (up to a minute) while it times out waiting for its lock: a long
// transaction on the table must not make inserts queue behind the DDL for
// longer than the timeout.
func withLockTimeout(ctx context.Context, conn *pgx.Conn, timeout time.Duration, log *slog.Logger, ddl func() error) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf(`SET lock_timeout = %d`, timeout.Milliseconds())); err != nil {
		return fmt.Errorf("setting lock_timeout: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `RESET lock_timeout`) //nolint:errcheck // the next statement says if the connection broke
	b := backoff.NewExponentialBackOff()
	b.MaxElapsedTime = time.Minute
	return backoff.RetryNotify(func() error {
		err := ddl()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return err
		}
		if err != nil {
			return backoff.Permanent(err)
		}
		return nil
	}, backoff.WithContext(b, ctx), func(err error, wait time.Duration) {
		log.Warn("waiting for a lock on the outbox table; retrying", "err", err, "retry_in", wait)
	})
}
