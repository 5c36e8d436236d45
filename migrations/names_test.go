package migrations_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/migrations"
)

// TestHostileNamesCannotInject pins the bug where a --table or
// --publication containing $migration$ ended the publication's DO block
// early and ran the rest of the name as SQL (as the migrate role), and
// where migrations.Identifier split a quoted name containing a dot.
func TestHostileNamesCannotInject(t *testing.T) {
	t.Parallel()
	url := testenv.Database(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{`CREATE TABLE victim (x int)`, `CREATE SCHEMA "odd.schema"`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	hostile := `p$migration$; DROP TABLE victim; --'"`
	target := migrations.Target{Table: `"odd.schema"."out$migration$box"`, Publication: hostile}
	if _, err := migrations.Apply(ctx, conn, target, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	var victim bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('public.victim') IS NOT NULL`).Scan(&victim); err != nil {
		t.Fatal(err)
	}
	if !victim {
		t.Fatal("table victim was dropped: a name was run as SQL")
	}
	var tables []string
	rows, err := conn.Query(ctx, `SELECT schemaname || '|' || tablename FROM pg_publication_tables WHERE pubname = $1`, hostile)
	if err != nil {
		t.Fatal(err)
	}
	if tables, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || tables[0] != "odd.schema|out$migration$box" {
		t.Fatalf("publication %q covers %v, want the table odd.schema|out$migration$box", hostile, tables)
	}
}

// TestConstraintsRefuseRowsThatCouldNeverBePublished pins the bug where a
// row with an empty or invalid topic, or headers that are not a JSON object
// or carry an "id" key, reached the WAL and stopped the publisher at it on
// every restart: the default table now refuses it at insert time.
func TestConstraintsRefuseRowsThatCouldNeverBePublished(t *testing.T) {
	t.Parallel()
	url := testenv.Database(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := migrations.Apply(ctx, conn, migrations.Target{Table: "public.outbox", Publication: "outboxd"}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		topic, headers string // headers "" is NULL
		ok             bool
	}{
		{"orders.created", "", true},
		{"orders_v2-eu.x", `{"type": "created", "n": 1, "nested": {"id": 1}}`, true},
		{strings.Repeat("t", 249), `{}`, true},
		{"", "", false},
		{"has space", "", false},
		{"slash/topic", "", false},
		{"ünïcode", "", false},
		{strings.Repeat("t", 250), "", false},
		{".", "", false},
		{"..", "", false},
		{"ok", `[]`, false},
		{"ok", `"x"`, false},
		{"ok", `null`, false},
		{"ok", `1`, false},
		{"ok", `{"id": "42"}`, false},
		// Regression (issue 37): a row could name the progress topic and
		// forge an exactly-once publisher's progress, or an internal topic.
		{"outboxd.progress", "", false},
		{"__consumer_offsets", "", false},
		{"__", "", false},
		{"_one_underscore", "", true},
		{"outboxd.progress2", "", true},
		{"ok", `{"outboxd.source": "elsewhere"}`, false},
		{"ok", `{"outboxd.sources": 1}`, true},
	}
	for _, tt := range tests {
		var headers any
		if tt.headers != "" {
			headers = tt.headers
		}
		_, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload, headers) VALUES (gen_random_uuid(), $1, '{}', $2)`, tt.topic, headers)
		var pgErr *pgconn.PgError
		switch {
		case tt.ok && err != nil:
			t.Errorf("topic %q headers %s: refused: %v", tt.topic, tt.headers, err)
		case !tt.ok && !(errors.As(err, &pgErr) && pgErr.Code == "23514"):
			t.Errorf("topic %q headers %s: got %v, want a check violation", tt.topic, tt.headers, err)
		}
	}
}

// TestConstraintsReachExistingInstalls: a table migrated before the
// constraints existed gets them; an existing row that breaks them fails the
// validation with a message saying what to do, and after the row is gone
// migrate finishes.
func TestConstraintsReachExistingInstalls(t *testing.T) {
	t.Parallel()
	url := testenv.Database(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	target := migrations.Target{Table: "public.outbox", Publication: "outboxd"}
	if _, err := migrations.Apply(ctx, conn, target, log); err != nil {
		t.Fatal(err)
	}
	// Turn it back into a wave-1 install: no constraints, versions 1 and 2
	// recorded, and a row that could never be published.
	for _, q := range []string{
		`ALTER TABLE outbox DROP CONSTRAINT outboxd_topic_valid, DROP CONSTRAINT outboxd_headers_valid`,
		`DELETE FROM outboxd_migrations WHERE version > 2`,
		`INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), '', '{}')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	_, err = migrations.Apply(ctx, conn, target, log)
	if err == nil || !strings.Contains(err.Error(), "could never be published") || !strings.Contains(err.Error(), "outboxd_topic_valid") {
		t.Fatalf("Apply over a table with an unpublishable row = %v, want an error naming the constraint and saying what to do", err)
	}
	// The constraints already protect new inserts.
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), '', '{}')`); err == nil {
		t.Error("a row with an empty topic was accepted after the constraints were added NOT VALID")
	}
	if _, err := conn.Exec(ctx, `DELETE FROM outbox WHERE topic = ''`); err != nil {
		t.Fatal(err)
	}
	applied, err := migrations.Apply(ctx, conn, target, log)
	if err != nil || !slices.Equal(applied, []int{4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
		t.Fatalf("Apply after removing the row = %v, %v; want versions 4 to 15 (those after the failed one) applied", applied, err)
	}
}

// Regression (issue 37): outboxd_emit published a table-less event to the
// progress topic (forging an exactly-once publisher's progress) or to a
// Kafka internal topic, or with headers setting outboxd.source.
func TestEmitRefusesReservedTopics(t *testing.T) {
	t.Parallel()
	url := testenv.Database(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE app_events (id bigint)`); err != nil {
		t.Fatal(err)
	}
	// The function serves every table of the database, own tables too.
	if _, err := migrations.Apply(ctx, conn, migrations.Target{Table: "app_events", Publication: "outboxd", OwnTable: true}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		topic string
		ok    bool
	}{
		{"orders", true},
		{"_orders", true},
		{"outboxd.progress", false},
		{"__consumer_offsets", false},
	} {
		_, err := conn.Exec(ctx, `SELECT outboxd_emit($1, '{}')`, tt.topic)
		var pgErr *pgconn.PgError
		switch {
		case tt.ok && err != nil:
			t.Errorf("outboxd_emit to %q: %v", tt.topic, err)
		case !tt.ok && !(errors.As(err, &pgErr) && pgErr.Code == "23514" && strings.Contains(pgErr.Message, "reserved")):
			t.Errorf("outboxd_emit to %q: %v, want a check violation saying the topic is reserved", tt.topic, err)
		}
	}
	// Nor may its headers set the source header outboxd sets.
	_, err = conn.Exec(ctx, `SELECT outboxd_emit('orders', '{}', NULL, '{"outboxd.source": "elsewhere"}')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || !strings.Contains(pgErr.Message, "outboxd.source") {
		t.Errorf("outboxd_emit with an outboxd.source header: %v, want a check violation naming it", err)
	}
	// Regression (issue 49, item 5): nor the header an exactly-once
	// publisher's progress reader trusts.
	_, err = conn.Exec(ctx, `SELECT outboxd_emit('orders', '{}', NULL, '{"outboxd-transactional-id": "outboxd-x"}')`)
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || !strings.Contains(pgErr.Message, "outboxd-transactional-id") {
		t.Errorf("outboxd_emit with an outboxd-transactional-id header: %v, want a check violation naming it", err)
	}
}

// Regression (issue 49, item 5): a row of the default table could carry the
// header an exactly-once publisher's progress reader trusts, naming another
// pipeline's transactional id; it is refused at insert.
func TestDefaultTableRefusesTheTransactionalIDHeader(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := migrations.Apply(ctx, conn, migrations.Target{Table: "public.outbox", Publication: "outboxd"}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload, headers) VALUES (gen_random_uuid(), 'orders', '{}', '{"outboxd-transactional-id": "outboxd-x"}')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "outboxd_headers_not_transactional_id" {
		t.Errorf("inserting a row with an outboxd-transactional-id header: %v, want the check violation of outboxd_headers_not_transactional_id", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload, headers) VALUES (gen_random_uuid(), 'orders', '{}', '{"type": "x"}')`); err != nil {
		t.Errorf("inserting a row with other headers: %v", err)
	}
}
