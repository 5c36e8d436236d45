package slot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/outbox"
)

// Table is a table as outboxd receives its rows: every column, each marked
// whether the publication publishes it, and the publication's row filter.
type Table struct {
	Name      pgx.Identifier // schema, table
	Columns   []Column       // every column (not dropped), in column order
	RowFilter string         // the publication's row filter; "" when none
}

// Column is a column of a Table.
type Column struct {
	outbox.Column
	// Published: pgoutput sends the column. A column list (PostgreSQL
	// 15+) leaves the others out, and a generated column is sent only
	// where PostgreSQL 18's publication publishes it. For outboxd a
	// column not published is as good as missing.
	Published bool
	// Sequence: an identity column, or one whose default is nextval(...)
	// (serial, bigserial), on the table or on a partitioned table it is a
	// partition of (an insert through the root takes the root's default).
	Sequence bool
}

// String is the table's name as the checks' errors write it (schema.table).
func (t Table) String() string { return t.Name[0] + "." + t.Name[1] }

// Published returns the columns pgoutput sends, in column order.
func (t Table) Published() []outbox.Column {
	var cols []outbox.Column
	for _, c := range t.Columns {
		if c.Published {
			cols = append(cols, c.Column)
		}
	}
	return cols
}

// ReadPublication returns the publication's tables in schema and table
// name order (none when it does not exist or publishes none).
func ReadPublication(ctx context.Context, q Querier, publication string) ([]Table, error) {
	tables, err := readTables(ctx, q, &publication, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the tables of publication %s: %w", publication, err)
	}
	return tables, nil
}

// readTables is the one query for a table's columns as outboxd receives
// them: the tables of publication, or the table named table (SQL syntax)
// as a publication without a column list would publish it.
func readTables(ctx context.Context, q Querier, publication, table *string) ([]Table, error) {
	rows, err := q.Query(ctx, `WITH t AS (
			SELECT c.oid, n.nspname, c.relname, pt.attnames, pt.rowfilter
			FROM pg_catalog.pg_publication_tables pt
			JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
			JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
			WHERE pt.pubname = $1::text
			UNION ALL
			SELECT c.oid, n.nspname, c.relname, NULL, NULL
			FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = pg_catalog.to_regclass($2::text))
		SELECT t.nspname, t.relname, coalesce(t.rowfilter, ''), a.attname, a.atttypid::int8, a.atttypmod,
			-- attnames lists generated columns before 18 too, which pgoutput never sent before 18.
			CASE WHEN t.attnames IS NULL THEN a.attgenerated = ''
				ELSE a.attname = ANY (t.attnames) AND (a.attgenerated = '' OR pg_catalog.current_setting('server_version_num')::int >= 180000) END,
			EXISTS (SELECT 1 FROM (SELECT t.oid AS relid UNION SELECT relid FROM pg_catalog.pg_partition_ancestors(t.oid)) r
				JOIN pg_catalog.pg_attribute p ON p.attrelid = r.relid AND p.attname = a.attname AND NOT p.attisdropped
				LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = p.attrelid AND d.adnum = p.attnum
				WHERE p.attidentity <> '' OR pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%')
		FROM t JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY 1, 2, a.attnum`, publication, table)
	if err != nil {
		return nil, err
	}
	var tables []Table
	var schema, name, filter string
	var c Column
	var oid int64
	_, err = pgx.ForEachRow(rows, []any{&schema, &name, &filter, &c.Name, &oid, &c.TypeMod, &c.Published, &c.Sequence}, func() error {
		if n := len(tables); n == 0 || tables[n-1].Name[0] != schema || tables[n-1].Name[1] != name {
			tables = append(tables, Table{Name: pgx.Identifier{schema, name}, RowFilter: filter})
		}
		c.TypeOID = uint32(oid)
		t := &tables[len(tables)-1]
		t.Columns = append(t.Columns, c)
		return nil
	})
	return tables, err
}

// CheckPublication checks that the publication exists and that every table
// in it publishes the outbox columns with usable types. It returns the
// tables; its errors wrap ErrPublicationMissing or ErrTableUnusable, the
// latter listing every problem of every table. A table with its own
// mapping (cols.Tables) is checked against that.
func CheckPublication(ctx context.Context, conn *pgx.Conn, publication string, cols layout.Columns) ([]layout.TableName, error) {
	exists, err := publicationExists(ctx, conn, publication)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%w: %s: run `outboxd migrate` (or CREATE PUBLICATION %s FOR TABLE <outbox table> WITH (publish = 'insert'))", ErrPublicationMissing, publication, publication)
	}
	tables, err := ReadPublication(ctx, conn, publication)
	if err != nil {
		return nil, err
	}
	names := make([]layout.TableName, len(tables))
	var errs []error
	for i, t := range tables {
		names[i] = layout.TableName{Schema: t.Name[0], Name: t.Name[1]}
		if err := validate(t, cols, "publication "+publication); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return names, fmt.Errorf("%w: publication %s: %w", ErrTableUnusable, publication, errors.Join(errs...))
	}
	return names, nil
}

// CheckTable checks that table (in SQL syntax, e.g. app.events) has the
// outbox columns with usable types, as CheckPublication checks each table
// of a publication: migrate checks an own table with it before creating
// anything for it. Its error wraps ErrTableUnusable.
func CheckTable(ctx context.Context, conn *pgx.Conn, table string, cols layout.Columns) error {
	tables, err := readTables(ctx, conn, nil, &table)
	if err != nil {
		return fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	if len(tables) == 0 {
		return fmt.Errorf("%w: %s", ErrTableMissing, table)
	}
	if err := validate(tables[0], cols, "a publication"); err != nil {
		return fmt.Errorf("%w: %w", ErrTableUnusable, err)
	}
	return nil
}

// validate checks the columns t publishes against the mapping cols. A
// problem that a column the table has but does not publish would solve is
// said to be that column's: it is there, and not published (by, as it
// names it, by).
func validate(t Table, cols layout.Columns, by string) error {
	cols = cols.For(t.Name[0], t.Name[1])
	published := t.Published()
	err := layout.ValidateTable(t.String(), published, cols)
	if err == nil {
		return nil
	}
	var hidden []string
	for _, c := range t.Columns {
		if !c.Published && count(layout.ValidateTable(t.String(), append(published[:len(published):len(published)], c.Column), cols)) < count(err) {
			hidden = append(hidden, fmt.Sprintf("%q", c.Name))
		}
	}
	if len(hidden) == 0 {
		return err
	}
	what := "column " + hidden[0] + " exists but " + by + " does not publish it"
	if len(hidden) > 1 {
		what = "columns " + strings.Join(hidden, ", ") + " exist but " + by + " does not publish them"
	}
	return errors.Join(err, fmt.Errorf("table %s: %s (a column list leaves it out, or it is a generated column), "+
		"and outboxd sees only what is published, so to outboxd it is missing: add it to the column list (ALTER PUBLICATION ... SET TABLE), or publish the table without one",
		t, what))
}

// count is how many problems err joins.
func count(err error) int {
	if err == nil {
		return 0
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	return 1
}
