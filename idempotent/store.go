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

	"github.com/outboxd/outboxd/internal/daypart"
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
//
// That holds in a READ COMMITTED transaction only, where each statement
// takes its own snapshot. Under REPEATABLE READ or SERIALIZABLE the
// transaction's snapshot is taken by its first statement, the lock's,
// before the lock is granted: the insert would not see the key the other
// transaction committed, nor conflict with its row (another processed_at).
// So the Consumer begins its transactions READ COMMITTED explicitly,
// whatever default_transaction_isolation says.
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
	today := daypart.Day(now)
	for d := 0; d <= ahead; d++ {
		name, err := daypart.Create(ctx, db, s.table, today.AddDate(0, 0, d))
		if err != nil {
			return m, err
		}
		m.Ensured = append(m.Ensured, name)
	}
	parts, err := daypart.List(ctx, db, s.table)
	if err != nil {
		return m, err
	}
	for _, p := range parts {
		if p.End().After(now.Add(-ttl)) {
			continue // some of its day is within the TTL
		}
		if err := daypart.Drop(ctx, db, s.table, p, true); err != nil {
			return m, err
		}
		m.Dropped = append(m.Dropped, p.Name)
	}
	return m, nil
}

// claim records the keys that no committed row (and no earlier position
// in keys) has, and returns them. It takes the transaction-scoped advisory
// locks of the keys first, in ascending order; the insert is a later
// statement, so its snapshot sees every transaction that held one of those
// locks before. tx must be READ COMMITTED (see Store) and claim its first
// statement. Both statements go in one round trip.
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
