package testenv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
)

// TestSmokeKafkaProduceConsume proves the test bed's broker is a real Kafka
// that franz-go can produce to and consume from.
func TestSmokeKafkaProduceConsume(t *testing.T) {
	t.Parallel()
	brokers := testenv.Brokers(t)
	topic := testenv.Topic(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	want := &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("hello"), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("1")}}}
	if err := prod.ProduceSync(ctx, want).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	fetches := cons.PollRecords(ctx, 1)
	if err := fetches.Err(); err != nil {
		t.Fatalf("consuming: %v", err)
	}
	recs := fetches.Records()
	if len(recs) != 1 {
		t.Fatalf("consumed %d records, want 1", len(recs))
	}
	got := recs[0]
	if string(got.Key) != "k" || string(got.Value) != "hello" || len(got.Headers) != 1 || string(got.Headers[0].Value) != "1" {
		t.Fatalf("consumed key=%q value=%q headers=%v, want k/hello/id=1", got.Key, got.Value, got.Headers)
	}
}

// TestSmokeLogicalReplication proves the test bed's PostgreSQL decodes
// logically: a pgoutput slot streams one committed insert through pglogrepl.
func TestSmokeLogicalReplication(t *testing.T) {
	t.Parallel()
	dbURL := testenv.Database(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	for _, q := range []string{
		`CREATE TABLE smoke (id bigserial PRIMARY KEY, note text NOT NULL)`,
		`CREATE PUBLICATION smoke_pub FOR TABLE smoke`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	repl, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("opening replication connection: %v", err)
	}
	defer repl.Close(context.Background())

	slot := testenv.Name(t, "slot")
	if _, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{}); err != nil {
		t.Fatalf("creating slot: %v", err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO smoke (note) VALUES ('through the WAL')`); err != nil {
		t.Fatal(err)
	}
	err = pglogrepl.StartReplication(ctx, repl, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'smoke_pub'"},
	})
	if err != nil {
		t.Fatalf("starting replication: %v", err)
	}

	relations := map[uint32]*pglogrepl.RelationMessage{}
	var got string
	for got == "" {
		msg, err := repl.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receiving: %v", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			continue
		}
		if len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		lm, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			t.Fatal(err)
		}
		switch m := lm.(type) {
		case *pglogrepl.RelationMessage:
			relations[m.RelationID] = m
		case *pglogrepl.InsertMessage:
			rel := relations[m.RelationID]
			if rel == nil || rel.RelationName != "smoke" {
				t.Fatalf("insert for unknown relation %d", m.RelationID)
			}
			for i, c := range rel.Columns {
				if c.Name == "note" {
					got = string(m.Tuple.Columns[i].Data)
				}
			}
		}
	}
	if got != "through the WAL" {
		t.Fatalf("streamed note %q, want %q", got, "through the WAL")
	}

	// The slot must be released before it can be dropped: end the session.
	repl.Close(ctx)
	if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil && !strings.Contains(err.Error(), "is active") {
		t.Fatalf("dropping slot: %v", err)
	}
}
