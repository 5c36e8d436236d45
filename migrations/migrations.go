package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/lib/sqlquote"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// Target names the objects the migrations create.
type Target struct {
	// Table is the outbox table in SQL syntax, optionally schema-qualified:
	// public.outbox, or "App"."Outbox" for a name with capitals or other
	// characters (unquoted parts are folded to lower case, as in SQL).
	Table string
	// Publication is the publication over Table.
	Publication string
	// OwnTable says Table is the application's own, of another shape than
	// the default table: the migrations that create or constrain the
	// default table (marked defaultTableOnly) are left out.
	OwnTable bool
	// Partitioned creates the default table partitioned by day on
	// created_at (PARTITION BY RANGE, with a DEFAULT partition so that an
	// insert never fails for want of a day's partition) and the
	// publication WITH publish_via_partition_root, so that every partition
	// is published as the table itself. The day partitions come from
	// package retention (migrate and prune). It applies to a new table.
	Partitioned bool
}

// defaultTableOnly marks, as the first line of its file, a migration that
// creates or constrains the default outbox table.
const defaultTableOnly = "-- outboxd: default table only"

// Migration is one embedded SQL file rendered for a Target.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// key identifies the target in the bookkeeping table.
func (t Target) key() string { return "table=" + t.Table + " publication=" + t.Publication }

// Load renders the embedded migrations for t, in version order.
func Load(t Target) ([]Migration, error) {
	if t.Table == "" || t.Publication == "" {
		return nil, fmt.Errorf("loading migrations: table and publication names are required")
	}
	names, err := fs.Glob(sqlFiles, "sql/*.sql")
	if err != nil {
		return nil, fmt.Errorf("listing embedded migrations: %w", err)
	}
	sort.Strings(names)
	table, err := sqlquote.ParseQualified(t.Table)
	if err != nil {
		return nil, fmt.Errorf("loading migrations: %w", err)
	}
	// Names enter the SQL only as quoted identifiers or string literals
	// (see package sqlquote); dollar-quoted blocks read them from settings.
	deflt := slices.Clone(table)
	deflt[len(deflt)-1] += "_default"
	data := map[string]any{
		"Partitioned":        t.Partitioned,
		"DefaultPartition":   deflt.Sanitize(),
		"Table":              table.Sanitize(),
		"TableLiteral":       sqlquote.Literal(table.Sanitize()),
		"Publication":        sqlquote.Identifier(t.Publication),
		"PublicationLiteral": sqlquote.Literal(t.Publication),
	}
	var out []Migration
	for _, name := range names {
		base := path.Base(name)
		ver, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: name does not start with a version number", base)
		}
		raw, err := sqlFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", base, err)
		}
		if t.OwnTable && strings.HasPrefix(string(raw), defaultTableOnly) {
			continue
		}
		tmpl, err := template.New(base).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return nil, fmt.Errorf("parsing migration %s: %w", base, err)
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("rendering migration %s: %w", base, err)
		}
		out = append(out, Migration{Version: ver, Name: strings.TrimSuffix(base, ".sql"), SQL: b.String()})
	}
	return out, nil
}

const bookkeeping = `CREATE TABLE IF NOT EXISTS outboxd_migrations (
    target     text        NOT NULL,
    version    integer     NOT NULL,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target, version)
)`

// lockKey is the advisory lock serializing concurrent migrate runs.
const lockKey = 0x6f7574626f7864 // "outboxd"

// Apply applies every migration not yet recorded for t and returns the
// versions it applied (none when already up to date).
func Apply(ctx context.Context, conn *pgx.Conn, t Target, log *slog.Logger) ([]int, error) {
	ms, err := Load(t)
	if err != nil {
		return nil, err
	}
	// Under the lock too: concurrent CREATE TABLE IF NOT EXISTS can collide.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(lockKey)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, bookkeeping)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating outboxd_migrations: %w", err)
	}
	var applied []int
	for _, m := range ms {
		done, err := applyOne(ctx, conn, t, m)
		if err != nil {
			return applied, err
		}
		if done {
			applied = append(applied, m.Version)
			log.Info("applied migration", "version", m.Version, "name", m.Name, "table", t.Table, "publication", t.Publication)
		}
	}
	return applied, nil
}

func applyOne(ctx context.Context, conn *pgx.Conn, t Target, m Migration) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(lockKey)); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outboxd_migrations WHERE target = $1 AND version = $2)`, t.key(), m.Version).Scan(&exists); err != nil {
			return fmt.Errorf("reading outboxd_migrations: %w", err)
		}
		if exists {
			return nil
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outboxd_migrations (target, version, name) VALUES ($1, $2, $3)`, t.key(), m.Version, m.Name); err != nil {
			return fmt.Errorf("recording it: %w", err)
		}
		applied = true
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23514" { // check_violation
		return false, fmt.Errorf("applying migration %s: %w: rows already in %s could never be published "+
			"(constraint %s; see its definition with \\d %s); delete or correct them, then run migrate again",
			m.Name, err, t.Table, pgErr.ConstraintName, t.Table)
	}
	if err != nil {
		return false, fmt.Errorf("applying migration %s: %w", m.Name, err)
	}
	return applied, nil
}
