package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testbed"
)

// scenario is one configuration both systems run with.
type scenario struct {
	Name        string   `json:"name"`
	What        string   `json:"what"`
	Connector   []string `json:"connector"` // connector properties beyond bench/debezium's template
	Outboxd     []string `json:"outboxd"`   // outboxd run's flags
	topics      func() []string
	expandsJSON bool
}

const partitions = 3

func scenarios() []scenario {
	placement := "type:header:eventType,tenant:header,occurred_at:header,occurred_ms:header,local_at:header,local_ms:header,flag:header,day:header:businessDay,note:header"
	defaultTopics := func() []string {
		var ts []string
		for _, a := range aggTypes {
			ts = append(ts, "outbox.event."+a)
		}
		return ts
	}
	return []scenario{
		{
			Name: "defaults",
			What: "the EventRouter's default settings, StringConverter for key and value",
			Connector: []string{"transforms.outbox.route.topic.replacement=outbox.event.${routedByValue}",
				"transforms.outbox.route.by.field=aggregatetype", "transforms.outbox.table.expand.json.payload=false"},
			Outboxd: []string{"--layout", "debezium"},
			topics:  defaultTopics,
		},
		{
			Name: "json-converters-and-headers",
			What: "JsonConverter (schemas.enable=false) for key and value, and every placed column type as a header",
			Connector: []string{"transforms.outbox.route.topic.replacement=outbox.event.${routedByValue}",
				"key.converter=org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable=false",
				"value.converter=org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable=false",
				"transforms.outbox.table.fields.additional.placement=" + placement},
			Outboxd: []string{"--layout", "debezium", "--debezium-key-converter", "json", "--debezium-value-converter", "json",
				"--debezium-table-fields-additional-placement", placement},
			topics: defaultTopics,
		},
		{
			Name: "expanded-payload-and-routing",
			What: "table.expand.json.payload=true with JsonConverter (schemas.enable=false), routed by type to events.${routedByValue}",
			Connector: []string{"transforms.outbox.route.by.field=type", "transforms.outbox.route.topic.replacement=events.${routedByValue}",
				"transforms.outbox.table.expand.json.payload=true",
				"value.converter=org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable=false"},
			Outboxd: []string{"--layout", "debezium", "--debezium-route-by-field", "type", "--debezium-route-topic-replacement", "events.${routedByValue}",
				"--debezium-table-expand-json-payload", "--debezium-value-converter", "json"},
			topics: func() []string {
				var ts []string
				for _, t := range types {
					ts = append(ts, "events."+t)
				}
				return ts
			},
			expandsJSON: true,
		},
	}
}

type env struct {
	o     options
	log   *slog.Logger
	pg    *testbed.Postgres
	kafka *testbed.Kafka
	adm   *kadm.Client
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	if o.outboxd == "" {
		bin, remove, err := testbed.BuildOutboxd()
		if err != nil {
			return err
		}
		defer remove()
		o.outboxd = bin
	}
	pg, err := testbed.StartPostgres(ctx, o.testbed)
	if err != nil {
		return err
	}
	defer pg.Remove(context.WithoutCancel(ctx))
	kafka, err := testbed.StartKafkaTemp(ctx, o.testbed)
	if err != nil {
		return err
	}
	defer kafka.Remove(context.WithoutCancel(ctx))
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka.Addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	e := &env{o: o, log: log, pg: pg, kafka: kafka, adm: kadm.NewClient(cl)}
	res := results{Date: time.Now().UTC().Format(time.RFC3339), Debezium: "3.6.1.Final on Kafka Connect 4.3.1 standalone (bench/debezium)",
		Postgres: "15", Kafka: "4.1.1", Partitions: partitions}
	for i, sc := range scenarios() {
		if o.only != "" && sc.Name != o.only {
			continue
		}
		log.Info("scenario", "name", sc.Name)
		r, err := e.scenario(ctx, i, sc)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		res.Scenarios = append(res.Scenarios, r)
		log.Info("compared", "scenario", sc.Name, "records", r.Records, "differing", r.Differing, "timestamp_differs", r.TimestampDiffers)
	}
	if o.only == "" || o.only == "handover" {
		h, err := e.handover(ctx, scenarios()[0])
		if err != nil {
			return fmt.Errorf("handover: %w", err)
		}
		res.Handover = &h
		log.Info("handover", "before", h.Before, "after", h.After, "missing", len(h.Missing), "duplicates", h.Duplicates)
	}
	return write(o.out, res)
}

// scenario inserts the corpus once, with a slot for each system created
// before, and has both publish it.
func (e *env) scenario(ctx context.Context, n int, sc scenario) (scenarioResult, error) {
	db := fmt.Sprintf("dbzcmp%d", n)
	if err := e.exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+db, "CREATE DATABASE "+db); err != nil {
		return scenarioResult{}, err
	}
	dbzSlot, obxSlot := fmt.Sprintf("dbz_cmp%d", n), fmt.Sprintf("obx_cmp%d", n)
	if err := e.setUpTable(ctx, db); err != nil {
		return scenarioResult{}, err
	}
	if err := e.exec(ctx, db, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, dbzSlot)); err != nil {
		return scenarioResult{}, err
	}
	if out, err := exec.CommandContext(ctx, e.o.outboxd, "migrate", "--database-url", e.dbURL(db), "--layout", "debezium",
		"--table", "public.outbox_debezium", "--publication", "dbz_outbox", "--slot", obxSlot).CombinedOutput(); err != nil {
		return scenarioResult{}, fmt.Errorf("outboxd migrate: %w\n%s", err, out)
	}
	var want int
	for _, r := range corpus() {
		if sc.expandsJSON && r.notExpanded {
			continue
		}
		if err := e.insert(ctx, db, r); err != nil {
			return scenarioResult{}, err
		}
		want++
	}
	topics := sc.topics()
	if err := e.recreateTopics(ctx, topics); err != nil {
		return scenarioResult{}, err
	}
	dbz, err := e.debezium(ctx, sc, db, dbzSlot, topics, want)
	if err != nil {
		return scenarioResult{}, err
	}
	if err := e.recreateTopics(ctx, topics); err != nil {
		return scenarioResult{}, err
	}
	obx, err := e.outboxdRun(ctx, sc, db, obxSlot, topics, want)
	if err != nil {
		return scenarioResult{}, err
	}
	return compare(sc, dbz, obx), nil
}

// handoverResult is what a consumer of the topics saw when Kafka Connect
// was stopped and outboxd started on Debezium's own slot.
type handoverResult struct {
	Before     int      `json:"before"`     // rows written while Debezium ran
	After      int      `json:"after"`      // rows written while neither ran
	Missing    []string `json:"missing"`    // ids never in Kafka
	Duplicates int      `json:"duplicates"` // records of an id already there
	Differing  int      `json:"differing"`  // a duplicate whose fields (timestamp aside) differ from the first copy
}

// handover is the cutover a team does: Debezium streams the first rows,
// Kafka Connect is stopped (SIGTERM: it flushes its offsets and confirms
// the slot), more rows are written, and outboxd starts on Debezium's slot
// and publication. Every row must be in the topics, in the same shape.
func (e *env) handover(ctx context.Context, sc scenario) (handoverResult, error) {
	var h handoverResult
	db, slot := "dbzhandover", "dbz_handover"
	if err := e.exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+db, "CREATE DATABASE "+db); err != nil {
		return h, err
	}
	if err := e.setUpTable(ctx, db); err != nil {
		return h, err
	}
	if err := e.exec(ctx, db, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, slot)); err != nil {
		return h, err
	}
	topics := sc.topics()
	if err := e.recreateTopics(ctx, topics); err != nil {
		return h, err
	}
	insert := func(n int) error {
		for range n {
			for _, r := range corpus() {
				if err := e.insert(ctx, db, r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	rows := len(corpus())
	if err := insert(3); err != nil {
		return h, err
	}
	h.Before = 3 * rows
	if _, err := e.debezium(ctx, sc, db, slot, topics, h.Before); err != nil { // stops Connect when it has them
		return h, err
	}
	if err := insert(2); err != nil {
		return h, err
	}
	h.After = 2 * rows
	// outboxd's own tables, over Debezium's slot (adopted, not created).
	if out, err := exec.CommandContext(ctx, e.o.outboxd, "migrate", "--database-url", e.dbURL(db), "--layout", "debezium",
		"--table", "public.outbox_debezium", "--publication", "dbz_outbox", "--slot", slot).CombinedOutput(); err != nil {
		return h, fmt.Errorf("outboxd migrate: %w\n%s", err, out)
	}
	recs, err := e.outboxdRun(ctx, sc, db, slot, topics, h.Before+h.After)
	if err != nil {
		return h, err
	}
	ids, err := e.ids(ctx, db)
	if err != nil {
		return h, err
	}
	first := map[string]shown{}
	for _, r := range recs {
		id := idOf(r)
		s := show(r)
		if f, dup := first[id]; dup {
			h.Duplicates++
			if f.topic != s.topic || f.key != s.key || f.value != s.value || f.headers != s.headers || (r.Key != nil && f.partition != s.partition) {
				h.Differing++
			}
			continue
		}
		first[id] = s
	}
	for _, id := range ids {
		if _, ok := first[id]; !ok {
			h.Missing = append(h.Missing, id)
		}
	}
	return h, nil
}

// ids are the ids of the table's rows.
func (e *env) ids(ctx context.Context, db string) ([]string, error) {
	conn, err := pgx.Connect(ctx, e.dbURL(db))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT id::text FROM outbox_debezium`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// debezium runs Kafka Connect with the scenario's connector settings until
// the routed topics hold want records, and returns them.
func (e *env) debezium(ctx context.Context, sc scenario, db, slot string, topics []string, want int) ([]*kgo.Record, error) {
	work, err := os.MkdirTemp("", "outboxd-dbzcmp-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	extra := filepath.Join(work, "extra.properties")
	if err := os.WriteFile(extra, []byte(strings.Join(sc.Connector, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	u, err := url.Parse(e.pg.URL)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, e.o.debezium, "start", work, u.Hostname(), u.Port(), db, e.kafka.Addr, "dbzcmp")
	cmd.Env = append(os.Environ(), "DBZ_PROFILE=latency", "DBZ_SLOT_NAME="+slot, "DBZ_CONNECTOR_EXTRA="+extra)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("starting Debezium: %w\n%s", err, out)
	}
	defer func() { _, _ = exec.Command(e.o.debezium, "stop", work).CombinedOutput() }()
	recs, err := e.consume(ctx, topics, want, func() error {
		if out, err := exec.Command(e.o.debezium, "status", work).CombinedOutput(); err != nil && strings.Contains(string(out), "FAILED") {
			log, _ := os.ReadFile(filepath.Join(work, "connect.log"))
			return fmt.Errorf("the connector failed:\n%s", tail(string(log), 40))
		}
		return nil
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(work, "connect.log"))
		return nil, fmt.Errorf("Debezium: %w\nconnect.log tail:\n%s", err, tail(string(log), 40))
	}
	return recs, nil
}

// outboxdRun runs outboxd with the scenario's flags until the topics hold
// want records, and returns them.
func (e *env) outboxdRun(ctx context.Context, sc scenario, db, slot string, topics []string, want int) ([]*kgo.Record, error) {
	args := append([]string{"run", "--database-url", e.dbURL(db), "--brokers", e.kafka.Addr, "--slot", slot,
		"--publication", "dbz_outbox", "--status-interval", "1s"}, sc.Outboxd...)
	cmd := exec.CommandContext(ctx, e.o.outboxd, args...)
	var log strings.Builder
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); <-exited }()
	recs, err := e.consume(ctx, topics, want, func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("outboxd exited: %v\n%s", err, log.String())
		default:
			return nil
		}
	})
	if err != nil {
		return nil, fmt.Errorf("outboxd: %w\nlog:\n%s", err, log.String())
	}
	return recs, nil
}

// consume reads the topics from the start until want records with an id
// header are there and two seconds pass without more; alive reports a
// failed publisher.
func (e *env) consume(ctx context.Context, topics []string, want int, alive func() error) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Addr), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var recs []*kgo.Record
	deadline := time.Now().Add(3 * time.Minute)
	var quiet time.Time
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		got := fs.Records()
		recs = append(recs, got...)
		if len(got) > 0 {
			quiet = time.Now().Add(2 * time.Second)
		}
		if len(recs) >= want && time.Now().After(quiet) {
			return recs, nil
		}
		if err := alive(); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%d of %d records within 3 minutes", len(recs), want)
}

// setUpTable creates Debezium's outbox table and publication
// (bench/debezium/schema.sql) with the corpus's extra columns.
func (e *env) setUpTable(ctx context.Context, db string) error {
	schema, err := os.ReadFile(e.o.schema)
	if err != nil {
		return err
	}
	return e.exec(ctx, db, string(schema),
		`ALTER TABLE outbox_debezium ALTER COLUMN aggregateid DROP NOT NULL,
			ADD COLUMN tenant integer, ADD COLUMN occurred_at timestamptz, ADD COLUMN occurred_ms timestamptz(3),
			ADD COLUMN local_at timestamp, ADD COLUMN local_ms timestamp(3), ADD COLUMN flag boolean, ADD COLUMN day date,
			ADD COLUMN note text, ADD COLUMN tracingspancontext text`)
}

func (e *env) insert(ctx context.Context, db string, r row) error {
	return e.exec(ctx, db, fmt.Sprintf(`INSERT INTO outbox_debezium
		(id, aggregatetype, aggregateid, type, payload, tenant, occurred_at, occurred_ms, local_at, local_ms, flag, day, note, tracingspancontext)
		VALUES (gen_random_uuid(), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)`,
		r.aggType, r.aggID, r.typ, r.payload, r.tenant, r.occurredAt, r.occurredMs, r.localAt, r.localMs, r.flag, r.day, r.note, r.tracing))
}

func (e *env) recreateTopics(ctx context.Context, topics []string) error {
	if _, err := e.adm.DeleteTopics(ctx, topics...); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		resp, err := e.adm.CreateTopics(ctx, partitions, 1, nil, topics...)
		if err == nil && resp.Error() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(err, resp.Error())
		}
	}
}

func (e *env) dbURL(db string) string {
	u, _ := url.Parse(e.pg.URL)
	u.Path = "/" + db
	return u.String()
}

func (e *env) exec(ctx context.Context, db string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, e.dbURL(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

func firstLine(s string) string { l, _, _ := strings.Cut(strings.TrimSpace(s), "\n"); return l }

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
