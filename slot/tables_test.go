package slot_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/slot"
)

// Regression (issue 38): the slot package's publication check read every
// column of a table while the backfill read only those the publication
// publishes, two queries for one fact. A column list that leaves an outbox
// column out passed the check, and the stream then received rows without
// it. There is one query now, honouring column lists (and generated
// columns, which pgoutput does not send), and the check says the column is
// there but not published.
func TestPublicationColumnListsAreHonoured(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `
		CREATE TABLE events (id bigserial PRIMARY KEY, aggregate_id uuid, topic text, payload jsonb, headers jsonb, secret text);
		CREATE TABLE derived (id bigserial PRIMARY KEY, aggregate_id uuid, topic text, body jsonb, headers jsonb,
			payload jsonb GENERATED ALWAYS AS (body) STORED);
		CREATE PUBLICATION p_all FOR TABLE events;
		CREATE PUBLICATION p_list FOR TABLE events (id, aggregate_id, topic, payload, headers);
		CREATE PUBLICATION p_no_payload FOR TABLE events (id, aggregate_id, topic, headers, secret);
		CREATE PUBLICATION p_derived FOR TABLE derived`); err != nil {
		t.Fatal(err)
	}
	version, err := slot.ServerVersion(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	cols := layout.DefaultColumns()

	tables, err := slot.ReadPublication(ctx, conn, "p_list")
	if err != nil || len(tables) != 1 {
		t.Fatalf("ReadPublication(p_list) = %v, %v; want one table", tables, err)
	}
	var published []string
	for _, c := range tables[0].Published() {
		published = append(published, c.Name)
	}
	if want := []string{"id", "aggregate_id", "topic", "payload", "headers"}; !slices.Equal(published, want) {
		t.Errorf("p_list publishes %v, want %v", published, want)
	}
	if n := len(tables[0].Columns); n != 6 {
		t.Errorf("p_list's table has %d columns, want all 6 (the backfill orders by columns a list leaves out)", n)
	}

	for _, pub := range []string{"p_all", "p_list"} {
		if _, err := slot.CheckPublication(ctx, conn, pub, cols); err != nil {
			t.Errorf("CheckPublication(%s) = %v, want none", pub, err)
		}
	}
	_, err = slot.CheckPublication(ctx, conn, "p_no_payload", cols)
	if !errors.Is(err, slot.ErrTableUnusable) {
		t.Fatalf("CheckPublication with a column list without the payload = %v, want ErrTableUnusable", err)
	}
	for _, w := range []string{`missing payload column "payload"`, `column "payload" exists but publication p_no_payload does not publish it`, "column list"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not say %q:\n%v", w, err)
		}
	}
	if strings.Contains(err.Error(), `"secret"`) {
		t.Errorf("error names a column the mapping does not use:\n%v", err)
	}

	// A generated column: pgoutput does not send it (18 does only when the
	// publication asks for it).
	_, err = slot.CheckPublication(ctx, conn, "p_derived", cols)
	if !errors.Is(err, slot.ErrTableUnusable) || !strings.Contains(err.Error(), `column "payload" exists but`) {
		t.Errorf("CheckPublication over a generated payload column (server %d) = %v, want it refused as not published", version, err)
	}
	if err := slot.CheckTable(ctx, conn, "public.derived", cols); !errors.Is(err, slot.ErrTableUnusable) {
		t.Errorf("CheckTable over a generated payload column = %v, want ErrTableUnusable", err)
	}
	if err := slot.CheckTable(ctx, conn, "public.events", cols); err != nil {
		t.Errorf("CheckTable(events) = %v, want none", err)
	}
}
