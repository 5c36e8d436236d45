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

	"github.com/outboxd/outboxd/lib/daypart"
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
//
// The upgrade to keys with a source (SourceAndID; Config.NoLegacyKeys):
// a second table, <table>_sourced (consumer, since), holds per consumer
// when it first claimed a key with a source: the start of that
// transaction, committed (or rolled back) with it. Before that, the keys
// were bare ids. A record whose key has a source is also taken as
// processed when processed_keys holds its bare id with a processed_at
// before since: a duplicate of a record processed before the upgrade.
// Bare ids recorded later (records of an outboxd not yet upgraded) never
// count. The lookup reads only the day partitions before since (run-time
// partition pruning), and none at all once those have expired. since is
// not in a day partition, so Maintain never drops it: bare ids recorded
// after it do not start to count once the TTL has passed.
type Store struct {
	table pgx.Identifier
}

// sourcedTable is the table holding when each consumer recorded its first
// key with a source: <table>_sourced, in the same schema.
func (s Store) sourcedTable() pgx.Identifier {
	t := slices.Clone(s.table)
	t[len(t)-1] += "_sourced"
	return t
}

// maxIdentifierBytes is PostgreSQL's limit on a name (NAMEDATALEN - 1).
const maxIdentifierBytes = 63

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
	// PostgreSQL cuts names at 63 bytes: <table>_sourced must stay apart
	// from <table>.
	if name := s.sourcedTable()[len(s.table)-1]; len(name) > maxIdentifierBytes {
		return fmt.Errorf("creating %s: the table name leaves no room for its companion %s (over %d bytes): choose a name of at most %d bytes",
			s.table.Sanitize(), name, maxIdentifierBytes, maxIdentifierBytes-len("_sourced"))
	}
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table.Sanitize()+` (
		consumer     text        NOT NULL,
		key          text        NOT NULL,
		processed_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (consumer, key, processed_at)
	) PARTITION BY RANGE (processed_at)`)
	if err != nil {
		return fmt.Errorf("creating %s: %w", s.table.Sanitize(), err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.sourcedTable().Sanitize()+` (
		consumer text        PRIMARY KEY,
		since    timestamptz NOT NULL
	)`); err != nil {
		return fmt.Errorf("creating %s: %w", s.sourcedTable().Sanitize(), err)
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
// in keys) has, and returns them. legacy is nil, or holds per key the
// bare id the key's record had before the upgrade to keys with a source
// ("" for none; see Store): a key whose bare id was recorded before this
// consumer's first key with a source is not recorded or returned either.
// It takes the transaction-scoped advisory locks of the keys (and of the
// bare ids) first, in ascending order; the insert is a later statement,
// so its snapshot sees every transaction that held one of those locks
// before. tx must be READ COMMITTED (see Store) and claim its first
// statement. The statements go in one round trip.
//
// Why the bare id's lock too: the lookup of a bare id and the insert of
// the key are atomic only if no transaction can commit that bare id
// between them unseen. A transaction that records a bare id (a record
// without a source; a consumer of the old version during a rolling
// upgrade) holds the bare id's lock, the same lockID, until it commits;
// holding it too, the insert runs only after any such transaction ended,
// and its snapshot sees the row. (Its processed_at is its transaction's
// start, so it may fall before since although committed after it.) The
// other way round, a record without a source never looks for the keys
// with one: outboxd sends a record without a source only before it was
// upgraded, so its keyed copy comes later, never first.
func (s Store) claim(ctx context.Context, tx pgx.Tx, consumer string, keys, legacy []string) (map[string]bool, error) {
	ids := make([]int64, 0, len(keys))
	withLegacy := false
	for i, k := range keys {
		ids = append(ids, lockID(consumer, k))
		if legacy != nil && legacy[i] != "" {
			ids = append(ids, lockID(consumer, legacy[i]))
			withLegacy = true
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_catalog.pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k ORDER BY k`, ids)
	// A key twice in keys conflicts with itself (same processed_at, the
	// transaction's now()): DO NOTHING keeps the first.
	if !withLegacy {
		b.Queue(`INSERT INTO `+s.table.Sanitize()+` (consumer, key)
		SELECT $1, k FROM unnest($2::text[]) AS k
		WHERE NOT EXISTS (SELECT 1 FROM `+s.table.Sanitize()+` p WHERE p.consumer = $1 AND p.key = k)
		ON CONFLICT DO NOTHING
		RETURNING key`, consumer, keys)
	} else {
		// The first transaction with a key with a source sets since
		// (committed with it, or rolled back with it); a concurrent one
		// waits on its row and then finds it.
		b.Queue(`INSERT INTO `+s.sourcedTable().Sanitize()+` (consumer, since) VALUES ($1, now()) ON CONFLICT (consumer) DO NOTHING`, consumer)
		b.Queue(`INSERT INTO `+s.table.Sanitize()+` (consumer, key)
		SELECT $1, k.key FROM unnest($2::text[], $3::text[]) AS k(key, legacy)
		WHERE NOT EXISTS (SELECT 1 FROM `+s.table.Sanitize()+` p WHERE p.consumer = $1 AND p.key = k.key)
		AND NOT EXISTS (SELECT 1 FROM `+s.table.Sanitize()+` p WHERE p.consumer = $1 AND p.key = NULLIF(k.legacy, '')
			AND p.processed_at < (SELECT s.since FROM `+s.sourcedTable().Sanitize()+` s WHERE s.consumer = $1))
		ON CONFLICT DO NOTHING
		RETURNING key`, consumer, keys, legacy)
	}
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return nil, fmt.Errorf("locking %d keys: %w", len(ids), err)
	}
	if withLegacy {
		if _, err := res.Exec(); err != nil {
			return nil, fmt.Errorf("recording when %s recorded its first key with a source: %w", consumer, err)
		}
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
