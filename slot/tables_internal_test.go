package slot

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
)

// The one table query tells a sequence-filled id (serial, identity, a
// partition of a table whose id is one) from one the application assigns,
// on the real catalog, for the backfill's choice of order (moved with the
// query from package cdc).
func TestReadTablesSeesSequences(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE serial_id (id bigserial PRIMARY KEY, at timestamptz);
		CREATE TABLE identity_id (id int GENERATED ALWAYS AS IDENTITY, at timestamptz);
		CREATE SEQUENCE own_seq;
		CREATE TABLE default_id (id bigint DEFAULT nextval('own_seq'));
		CREATE TABLE assigned_id (id bigint PRIMARY KEY, at timestamptz);
		CREATE TABLE uuid_id (id uuid PRIMARY KEY, at timestamptz);
		CREATE TABLE parted (id bigserial, at timestamptz NOT NULL) PARTITION BY RANGE (at);
		CREATE TABLE attached (at timestamptz NOT NULL, id bigint NOT NULL);
		ALTER TABLE parted ATTACH PARTITION attached FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]bool{"serial_id": true, "identity_id": true, "default_id": true, "assigned_id": false, "uuid_id": false, "parted": true, "attached": true} {
		name := "public." + table
		tables, err := readTables(t.Context(), conn, nil, &name)
		if err != nil || len(tables) != 1 {
			t.Fatalf("%s: %d tables, %v", table, len(tables), err)
		}
		got, found := false, false
		for _, c := range tables[0].Columns {
			if c.Name == "id" {
				got, found = c.Sequence, true
			}
		}
		if !found || got != want {
			t.Errorf("%s: id found %v, filled from a sequence %v; want %v", table, found, got, want)
		}
	}
}
