// Package daypart manages the day partitions of a table partitioned by
// range on a timestamptz column: one partition per UTC day, named
// <table>_pYYYYMMDD in the table's schema, covering [day, day+1). It is
// shared by the idempotent consumer's processed_keys table and the
// partitioned outbox (outboxd prune).
//
// Invariant: it never touches a partition whose name is not of that form
// (a DEFAULT partition, or one the operator made); a day's partition is
// dropped only by Drop, and only whole.
package daypart

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the functions need of a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Part is one day partition.
type Part struct {
	Name string    // unqualified, e.g. outbox_p20261202
	Day  time.Time // its first instant, UTC midnight
}

// End is the first instant after the partition's day.
func (p Part) End() time.Time { return p.Day.AddDate(0, 0, 1) }

// Day returns the UTC day of t, as midnight.
func Day(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }

// Name is the partition of day for table: <table>_pYYYYMMDD in its schema.
func Name(table pgx.Identifier, day time.Time) pgx.Identifier {
	name := slices.Clone(table)
	name[len(name)-1] += "_p" + Day(day).Format("20060102")
	return name
}

// Create creates the partition of day if it does not exist.
func Create(ctx context.Context, db DB, table pgx.Identifier, day time.Time) (string, error) {
	day = Day(day)
	name := Name(table, day)
	_, err := db.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		name.Sanitize(), table.Sanitize(), day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339)))
	if err != nil {
		return "", fmt.Errorf("creating partition %s: %w", name.Sanitize(), err)
	}
	return name[len(name)-1], nil
}

// List returns the table's day partitions, oldest first.
func List(ctx context.Context, db DB, table pgx.Identifier) ([]Part, error) {
	rows, err := db.Query(ctx, `SELECT c.relname FROM pg_catalog.pg_inherits i
		JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY 1`, table.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("listing the partitions of %s: %w", table.Sanitize(), err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing the partitions of %s: %w", table.Sanitize(), err)
	}
	prefix := table[len(table)-1] + "_p"
	var out []Part
	for _, n := range names {
		day, err := time.Parse("20060102", strings.TrimPrefix(n, prefix))
		if !strings.HasPrefix(n, prefix) || err != nil || len(n) != len(prefix)+8 {
			continue // not one of ours
		}
		out = append(out, Part{Name: n, Day: day})
	}
	return out, nil
}

// Drop detaches a partition and drops it. concurrently detaches without
// blocking the table's inserts, which PostgreSQL allows only when the
// table has no DEFAULT partition (and outside a transaction block).
//
// It is safe to call again after a failure: a concurrent detach whose
// second phase was interrupted (a lock timeout, a crash) leaves the
// partition pending detach, which is finished (FINALIZE) instead of
// started again; one already detached is only dropped.
func Drop(ctx context.Context, db DB, table pgx.Identifier, p Part, concurrently bool) error {
	name := append(slices.Clone(table[:len(table)-1]), p.Name)
	rows, err := db.Query(ctx, `SELECT i.inhdetachpending FROM pg_catalog.pg_inherits i
		WHERE i.inhparent = $1::regclass AND i.inhrelid = to_regclass($2)`, table.Sanitize(), name.Sanitize())
	if err != nil {
		return fmt.Errorf("reading partition %s: %w", name.Sanitize(), err)
	}
	pending, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return fmt.Errorf("reading partition %s: %w", name.Sanitize(), err)
	}
	detach := `ALTER TABLE ` + table.Sanitize() + ` DETACH PARTITION ` + name.Sanitize()
	switch {
	case len(pending) == 0: // detached already
		detach = ""
	case pending[0]:
		detach += ` FINALIZE`
	case concurrently:
		detach += ` CONCURRENTLY`
	}
	if detach != "" {
		if _, err := db.Exec(ctx, detach); err != nil {
			return fmt.Errorf("detaching partition %s: %w", name.Sanitize(), err)
		}
	}
	if _, err := db.Exec(ctx, `DROP TABLE IF EXISTS `+name.Sanitize()); err != nil {
		return fmt.Errorf("dropping partition %s: %w", name.Sanitize(), err)
	}
	return nil
}
