package slot

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// outboxd_slots is trusted: a pending backfill it records makes run drop
// the slot and backfill with the recorded predicate. So whoever can write
// it can make run drop the slot or run stored SQL. These are the checks
// run applies to what it reads there.

// CheckBackfillWhere checks a backfill predicate as run's --backfill-where
// is checked, whether it comes from the command line or from a pending
// backfill recorded in outboxd_slots.
func CheckBackfillWhere(where string) error {
	switch {
	case strings.TrimSpace(where) == "":
		return errors.New("must not be blank (use \"true\" for every row)")
	case strings.ContainsRune(where, 0):
		return errors.New("must not contain a NUL character")
	}
	return nil
}

// OtherWriters returns the roles other than the current user and the
// table's owner that may change outboxd_slots (INSERT, UPDATE, DELETE or
// TRUNCATE, held directly, through PUBLIC or a role they belong to),
// superusers left out (nothing restricts them). Such a role can make run
// drop the slot (a forged pending backfill) or run a stored predicate. It
// returns none when there is no outboxd_slots.
func OtherWriters(ctx context.Context, q Querier) ([]string, error) {
	var roles []string
	err := q.QueryRow(ctx, `
		SELECT coalesce(array_agg(r.rolname ORDER BY r.rolname), '{}')
		FROM pg_catalog.pg_roles r,
		     (SELECT c.oid, c.relowner FROM pg_catalog.pg_class c
		      WHERE c.oid = pg_catalog.to_regclass('outboxd_slots')) t
		WHERE NOT r.rolsuper AND r.rolname !~ '^pg_'
		  AND r.rolname <> current_user AND r.oid <> t.relowner
		  AND (pg_catalog.has_table_privilege(r.oid, t.oid, 'INSERT') OR pg_catalog.has_table_privilege(r.oid, t.oid, 'UPDATE')
		       OR pg_catalog.has_table_privilege(r.oid, t.oid, 'DELETE') OR pg_catalog.has_table_privilege(r.oid, t.oid, 'TRUNCATE'))`).Scan(&roles)
	if err != nil {
		return nil, fmt.Errorf("reading who may write outboxd_slots: %w", err)
	}
	return roles, nil
}
