package migrations_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/migrations"
)

func TestLoadQuotesNames(t *testing.T) {
	t.Parallel()
	ms, err := migrations.Load(migrations.Target{Table: `app."Out""box"`, Publication: "it's"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 {
		t.Fatalf("loaded %d migrations, want at least 2", len(ms))
	}
	all := ms[0].SQL + ms[1].SQL
	for _, want := range []string{`"app"."Out""box"`, `'it''s'`} {
		if !strings.Contains(all, want) {
			t.Errorf("rendered SQL lacks %s:\n%s", want, all)
		}
	}
	if _, err := migrations.Load(migrations.Target{Table: "t"}); err == nil {
		t.Error("Load without a publication name: no error")
	}
	for _, bad := range []string{`app.Out"box`, "a.b.c", "x; drop table t", `"unterminated`} {
		if _, err := migrations.Load(migrations.Target{Table: bad, Publication: "p"}); err == nil {
			t.Errorf("Load with table %q: no error", bad)
		}
	}
}

// TestLoadOwnTable: with the application's own table, only the migrations
// that do not create or constrain the default table are loaded.
func TestLoadOwnTable(t *testing.T) {
	t.Parallel()
	versions := func(own bool) []int {
		ms, err := migrations.Load(migrations.Target{Table: "app.events", Publication: "p", OwnTable: own})
		if err != nil {
			t.Fatal(err)
		}
		var vs []int
		for _, m := range ms {
			vs = append(vs, m.Version)
			if own && strings.Contains(m.SQL, "CREATE TABLE IF NOT EXISTS \"app\".\"events\"") {
				t.Errorf("migration %s creates the application's table", m.Name)
			}
		}
		return vs
	}
	if got, want := fmt.Sprint(versions(false)), "[1 2 3 4 5 6 7 8 9 10 11 12 13 14 15]"; got != want {
		t.Errorf("default table: versions %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(versions(true)), "[2 5 6 9 12 13 14 15]"; got != want {
		t.Errorf("own table: versions %s, want %s", got, want)
	}
}

func TestApplyIsIdempotentAndConcurrentSafe(t *testing.T) {
	t.Parallel()
	url := testenv.Database(t)
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	target := migrations.Target{Table: "public.outbox", Publication: "outboxd"}

	// Three concurrent runs: every version is applied exactly once overall.
	var g errgroup.Group
	results := make([][]int, 3)
	for i := range results {
		g.Go(func() error {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			results[i], err = migrations.Apply(ctx, conn, target, log)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	var all []int
	for _, r := range results {
		all = append(all, r...)
	}
	slices.Sort(all)
	if !slices.Equal(all, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
		t.Fatalf("versions applied over concurrent runs = %v, want 1 to 15", all)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	again, err := migrations.Apply(ctx, conn, target, log)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Apply = %v, %v; want nothing applied", again, err)
	}
	var pubTables []string
	rows, err := conn.Query(ctx, `SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = 'outboxd'`)
	if err != nil {
		t.Fatal(err)
	}
	pubTables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pubTables, []string{"public.outbox"}) {
		t.Fatalf("publication outboxd covers %v, want [public.outbox]", pubTables)
	}
	var inserts, updates bool
	if err := conn.QueryRow(ctx, `SELECT pubinsert, pubupdate FROM pg_publication WHERE pubname = 'outboxd'`).Scan(&inserts, &updates); err != nil {
		t.Fatal(err)
	}
	if !inserts || updates {
		t.Fatalf("publication publishes insert=%v update=%v, want inserts only", inserts, updates)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), 't', '{}')`); err != nil {
		t.Fatalf("inserting into the migrated outbox: %v", err)
	}
}
