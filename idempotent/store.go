package idempotent

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Store is the processed_keys table: one row per (consumer, key) processed,
// partitioned by day (UTC) on processed_at.
//
// Why an advisory lock and not ON CONFLICT alone: a unique constraint on a
// partitioned table must include the partition key, so (consumer, key)
// cannot be unique across days, and a redelivery on another day than the
// first delivery would not conflict. Instead a transaction takes a
// transaction-scoped advisory lock on each key of its batch (in ascending
// order, so two transactions never deadlock), and only then inserts each
// key unless a committed row has it. A second transaction with the same
// key waits at the lock until the first commits or rolls back, and its
// insert, a later statement, sees the outcome: the keys the insert returns
// are the duplicate test, with no window between check and insert.
type Store struct {
	table pgx.Identifier
}

// DefaultTable is the table's default name.
const DefaultTable = "processed_keys"

// NewStore returns the Store of a table (schema-qualified or not; "" for
// DefaultTable).
func NewStore(table string) Store {
	if table == "" {
		table = DefaultTable
	}
	return Store{table: pgx.Identifier(strings.Split(table, "."))}
}

// DB is what the Store needs of a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Migrate creates the table (idempotently). The partitions come from
// Maintain.
func (s Store) Migrate(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table.Sanitize()+` (
		consumer     text        NOT NULL,
		key          text        NOT NULL,
		processed_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (consumer, key, processed_at)
	) PARTITION BY RANGE (processed_at)`)
	if err != nil {
		return fmt.Errorf("creating %s: %w", s.table.Sanitize(), err)
	}
	return nil
}

// Maintained is what one Maintain call did.
type Maintained struct {
	Ensured, Dropped []string // partition names: those that exist now for today and the days ahead, and those dropped
}

// Maintain creates the partitions of the days from now's to ahead days
// later, and drops every partition whose whole day ended more than ttl
// before now (detached concurrently first, so inserts never wait on it).
// now is a parameter for tests; pass time.Now().
func (s Store) Maintain(ctx context.Context, db DB, now time.Time, ttl time.Duration, ahead int) (Maintained, error) {
	var m Maintained
	if ttl <= 0 {
		return m, errors.New("maintaining processed keys: the TTL must be positive")
	}
	today := now.UTC().Truncate(24 * time.Hour)
	for d := 0; d <= ahead; d++ {
		day := today.AddDate(0, 0, d)
		name := s.partition(day)
		_, err := db.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
			name.Sanitize(), s.table.Sanitize(), day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339)))
		if err != nil {
			return m, fmt.Errorf("creating partition %s: %w", name.Sanitize(), err)
		}
		m.Ensured = append(m.Ensured, name[len(name)-1])
	}
	parts, err := s.partitions(ctx, db)
	if err != nil {
		return m, err
	}
	for _, p := range parts {
		if p.day.AddDate(0, 0, 1).After(now.Add(-ttl)) {
			continue // some of its day is within the TTL
		}
		name := append(slices.Clone(s.table[:len(s.table)-1]), p.name)
		if _, err := db.Exec(ctx, `ALTER TABLE `+s.table.Sanitize()+` DETACH PARTITION `+name.Sanitize()+` CONCURRENTLY`); err != nil {
			return m, fmt.Errorf("detaching partition %s: %w", name.Sanitize(), err)
		}
		if _, err := db.Exec(ctx, `DROP TABLE `+name.Sanitize()); err != nil {
			return m, fmt.Errorf("dropping partition %s: %w", name.Sanitize(), err)
		}
		m.Dropped = append(m.Dropped, p.name)
	}
	return m, nil
}

// partition names the partition of a day: <table>_pYYYYMMDD.
func (s Store) partition(day time.Time) pgx.Identifier {
	name := slices.Clone(s.table)
	name[len(name)-1] += "_p" + day.Format("20060102")
	return name
}

type part struct {
	name string
	day  time.Time
}

// partitions lists the table's day partitions, oldest first.
func (s Store) partitions(ctx context.Context, db DB) ([]part, error) {
	rows, err := db.Query(ctx, `SELECT c.relname FROM pg_catalog.pg_inherits i
		JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY 1`, s.table.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("listing the partitions of %s: %w", s.table.Sanitize(), err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing the partitions of %s: %w", s.table.Sanitize(), err)
	}
	prefix := s.table[len(s.table)-1] + "_p"
	var out []part
	for _, n := range names {
		day, err := time.Parse("20060102", strings.TrimPrefix(n, prefix))
		if !strings.HasPrefix(n, prefix) || err != nil {
			continue // not one of ours
		}
		out = append(out, part{name: n, day: day})
	}
	return out, nil
}

// claim records the keys that no committed row (and no earlier position
// in keys) has, and returns them. It takes the transaction-scoped advisory
// locks of the keys first, in ascending order; the insert is a later
// statement, so its snapshot sees every transaction that held one of those
// locks before. Both statements go in one round trip.
func (s Store) claim(ctx context.Context, tx pgx.Tx, consumer string, keys []string) (map[string]bool, error) {
	ids := make([]int64, len(keys))
	for i, k := range keys {
		ids[i] = lockID(consumer, k)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_catalog.pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k ORDER BY k`, ids)
	// A key twice in keys conflicts with itself (same processed_at, the
	// transaction's now()): DO NOTHING keeps the first.
	b.Queue(`INSERT INTO `+s.table.Sanitize()+` (consumer, key)
		SELECT $1, k FROM unnest($2::text[]) AS k
		WHERE NOT EXISTS (SELECT 1 FROM `+s.table.Sanitize()+` p WHERE p.consumer = $1 AND p.key = k)
		ON CONFLICT DO NOTHING
		RETURNING key`, consumer, keys)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return nil, fmt.Errorf("locking %d keys: %w", len(ids), err)
	}
	rows, err := res.Query()
	if err != nil {
		return nil, fmt.Errorf("recording %d keys: %w", len(keys), err)
	}
	fresh, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("recording %d keys: %w", len(keys), err)
	}
	out := make(map[string]bool, len(fresh))
	for _, k := range fresh {
		out[k] = true
	}
	return out, res.Close()
}

// lockID is a key's advisory lock: a 64-bit FNV-1a hash of the consumer
// and the key (a collision only makes two keys wait for each other).
func lockID(consumer, key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(consumer))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int64(h.Sum64())
}
