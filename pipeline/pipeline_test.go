package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/registry"
	"github.com/outboxd/outboxd/slot"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Validate reports the stages' problems under their path and the rules
// that span stages, all at once; New refuses what does not validate.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := pipeline.Config{Stream: cdc.Config{DatabaseURL: "postgres://localhost/app"}, Kafka: publish.Config{Brokers: []string{"k:9092"}}}
	tests := []struct {
		name   string
		change func(*pipeline.Config)
		fields []string
	}{
		{"defaults", func(*pipeline.Config) {}, nil},
		{"exactly-once", func(c *pipeline.Config) { c.Delivery = pipeline.ExactlyOnce }, nil},
		{"a stage's problems under its path", func(c *pipeline.Config) {
			c.Stream.ReadLinger, c.Pump.MaxInFlightRecords, c.Kafka.Linger, c.Monitor.Interval = time.Hour, -1, -1, -1
		}, []string{"Stream.ReadLinger", "Pump.MaxInFlightRecords", "Kafka.Linger", "Monitor.Interval"}},
		{"the stream's names are not the monitor's problem too", func(c *pipeline.Config) { c.Stream.DatabaseURL = "" }, []string{"Stream.DatabaseURL"}},
		{"dead letters with exactly-once", func(c *pipeline.Config) { c.Delivery, c.Pump.DeadLetterTopic = pipeline.ExactlyOnce, "dlq" },
			[]string{"Pump.DeadLetterTopic"}},
		{"backfill with exactly-once", func(c *pipeline.Config) {
			c.Delivery, c.Stream.CreateSlot, c.Stream.BackfillWhere = pipeline.ExactlyOnce, true, "true"
		}, []string{"Stream.BackfillWhere"}},
		{"transactions checked whatever the delivery", func(c *pipeline.Config) { c.Txn.Interval = time.Hour }, []string{"Txn.Timeout"}},
		{"unknown delivery", func(c *pipeline.Config) { c.Delivery = "exactly_once" }, []string{"Delivery"}},
		{"negative heartbeat", func(c *pipeline.Config) { c.Heartbeat = -1 }, []string{"Heartbeat"}},
		// Issue 50, item 4: this rule across stages lived in the command's
		// flag table only, so pipeline.New took what run refused.
		{"the Debezium layout's JSON value converter with a schema format", func(c *pipeline.Config) {
			c.Stream.Columns = layout.DebeziumColumns()
			c.Stream.Columns.Debezium.ValueConverter = layout.ConverterJSON
			c.Registry = registry.Config{URLs: []string{"http://registry:8081"}, Value: registry.Side{Format: format.Avro}}
		}, []string{"Registry.Value.Format"}},
		{"the Debezium layout's string value converter with a schema format", func(c *pipeline.Config) {
			c.Stream.Columns = layout.DebeziumColumns()
			c.Registry = registry.Config{URLs: []string{"http://registry:8081"}, Value: registry.Side{Format: format.Avro}}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.change(&c)
			err := c.Validate()
			var got []string
			if err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					var fe *field.Error
					if !errors.As(e, &fe) {
						t.Fatalf("problem %v is not a *field.Error", e)
					}
					got = append(got, fe.Field)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.fields, ",") {
				t.Fatalf("Validate() = %v; want problems with %v", err, tt.fields)
			}
			p, nerr := pipeline.New(c, discard())
			if (nerr != nil) != (err != nil) {
				t.Fatalf("New = %v, want Validate's answer %v", nerr, err)
			}
			if p != nil {
				p.Close()
			}
		})
	}
}

// A Pipeline built from one Config streams the slot's rows to Kafka and,
// stopped, returns nil with the slot confirmed past them, in both
// delivery modes.
func TestPipelineRunsOneSlotToKafka(t *testing.T) {
	t.Parallel()
	for _, delivery := range []string{pipeline.AtLeastOnce, pipeline.ExactlyOnce} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url, brokers := testenv.Database(t), testenv.Brokers(t)
			slotName, topic := testenv.Name(t, "slot"), testenv.CreateTopic(t, brokers, testenv.Name(t, "topic"), 1)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if _, err := migrations.Apply(ctx, conn, migrations.Target{Table: "public.outbox", Publication: "outboxd"}, discard()); err != nil {
				t.Fatal(err)
			}
			if _, err := slot.Create(ctx, conn, slotName, false); err != nil {
				t.Fatal(err)
			}
			cfg := pipeline.Config{
				Stream:   cdc.Config{DatabaseURL: url, Slot: slotName, StatusInterval: 200 * time.Millisecond},
				Kafka:    publish.Config{Brokers: brokers},
				Delivery: delivery,
				Txn:      publish.TxnConfig{ProgressTopic: testenv.Name(t, "progress")},
				Pump:     pump.Config{},
			}
			p, err := pipeline.New(cfg, discard())
			if err != nil {
				t.Fatal(err)
			}
			// One transaction: the WAL position read before its commit is
			// before the commit record, whatever other databases of the
			// cluster write meanwhile, so a slot confirmed past the
			// transaction is confirmed past it.
			const n = 20
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if _, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, $2)`,
					topic, fmt.Sprintf(`{"n": %d}`, i)); err != nil {
					t.Fatal(err)
				}
			}
			var beforeCommit string
			if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&beforeCommit); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(runCtx) }()
			t.Cleanup(func() {
				stop()
				<-done
			})

			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var got []string
			fetchCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			for len(got) < n && fetchCtx.Err() == nil {
				cl.PollFetches(fetchCtx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
			}
			for i, v := range got {
				if want := fmt.Sprintf(`{"n": %d}`, i); v != want {
					t.Fatalf("record %d is %s, want %s (records %q)", i, v, want, got)
				}
			}
			if len(got) != n {
				t.Fatalf("%d records in Kafka, want %d", len(got), n)
			}
			if st := p.Status(); st.State != pipeline.StateStreaming {
				t.Errorf("stream state %v while running, want streaming", st.State)
			}
			stop()
			select {
			case err := <-done:
				done <- err // for the cleanup
				if err != nil {
					t.Fatalf("Run after a stop = %v, want nil", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Run did not return after a stop")
			}
			var confirmedPast bool
			if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn > $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, slotName, beforeCommit).Scan(&confirmedPast); err != nil {
				t.Fatal(err)
			}
			if !confirmedPast {
				t.Errorf("slot not confirmed past the rows' commit (after %s) after a graceful stop", beforeCommit)
			}
		})
	}
}
