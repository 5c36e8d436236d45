package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/outboxd/outboxd/harness/netfault"
	"github.com/outboxd/outboxd/harness/testenv"
)

// registryCase is one value format of TestSchemaRegistryFormats: a
// schema, a compatible next version adding the field "note", and a
// payload that fits neither.
type registryCase struct {
	format   string
	typ      sr.SchemaType
	v1, v2   string
	bad      string
	protobuf bool
}

var registryCases = []registryCase{
	{format: "avro", typ: sr.TypeAvro,
		v1:  `{"type":"record","name":"Event","namespace":"shop","fields":[{"name":"n","type":"long"}]}`,
		v2:  `{"type":"record","name":"Event","namespace":"shop","fields":[{"name":"n","type":"long"},{"name":"note","type":"string","default":""}]}`,
		bad: `{"n": "five"}`},
	{format: "protobuf", typ: sr.TypeProtobuf, protobuf: true,
		v1:  "syntax = \"proto3\";\npackage shop;\nmessage Event { int32 n = 1; }\n",
		v2:  "syntax = \"proto3\";\npackage shop;\nmessage Event { int32 n = 1; string note = 2; }\n",
		bad: `{"n": "five"}`},
	{format: "json-schema", typ: sr.TypeJSON,
		v1:  `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`,
		v2:  `{"type":"object","properties":{"n":{"type":"integer"},"note":{"type":"string"}},"required":["n"],"additionalProperties":false}`,
		bad: `{"n": "five"}`},
}

// TestSchemaRegistryFormats: against a real schema registry (Apicurio
// Registry's Confluent-compatible API), each value format publishes every
// row encoded per its subject's schema with the key as an Avro string,
// and an independent implementation (fastavro, protoc with the protobuf
// runtime, Python's jsonschema) decodes each record back to its row. A
// version registered mid-stream is taken up by the rows that need it; a
// payload that fits neither version goes to the dead-letter topic raw,
// naming the subject; while the registry does not answer, the record that
// needs it and every one after it wait and the slot is not confirmed past
// them, and once it answers again all of them are published in order.
func TestSchemaRegistryFormats(t *testing.T) {
	t.Parallel()
	regURL := testenv.StartRegistry(t)
	python := testenv.SchemaCheck(t)
	for _, tc := range registryCases {
		t.Run(tc.format, func(t *testing.T) {
			t.Parallel()
			testRegistryFormat(t, regURL, python, tc)
		})
	}
	t.Run("debezium layout with avro", func(t *testing.T) {
		t.Parallel()
		testDebeziumLayoutWithAvro(t, regURL, python)
	})
	t.Run("exactly-once stops at a misfit", func(t *testing.T) {
		t.Parallel()
		testStopAtAMisfit(t, regURL, python)
	})
	t.Run("auto-registration under the topic-record strategy", func(t *testing.T) {
		t.Parallel()
		testAutoRegisterUnderTopicRecord(t, regURL, python)
	})
	t.Run("doctor", func(t *testing.T) {
		t.Parallel()
		testDoctorChecksTheRegistry(t, regURL)
	})
}

// Issue 53: doctor asks the registry for the subjects known ahead (a
// fixed topic's, a record name's) as the pipeline would resolve them: a
// missing subject fails with what to do, a registered one is named with
// its schema, a registry that does not answer fails, and with
// auto-registration nothing needs to exist ahead.
func testDoctorChecksTheRegistry(t *testing.T, regURL string) {
	w := newWorld(t)
	base := []string{"--database-url", w.url, "--slot", w.slot, "--brokers", w.brokers, "--topic-template", w.topic, "--value-format", "avro"}
	subject := "value subject " + w.topic + "-value"
	code, findings, out := doctor(t, append(base, "--schema-registry-url", regURL)...)
	if f := findingOf(findings, subject); code != 1 || f == nil || f.Severity != sevFail || !strings.Contains(f.Fix, "register the value schema under "+w.topic+"-value") {
		t.Errorf("doctor before the subject exists: exit %d, %+v; want 1, a failure saying to register it:\n%s", code, f, out)
	}
	cl, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cl.CreateSchema(t.Context(), w.topic+"-value", sr.Schema{Schema: registryCases[0].v1, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	_, findings, out = doctor(t, append(base, "--schema-registry-url", regURL)...)
	if f := findingOf(findings, subject); f == nil || f.Severity != sevOK || !strings.Contains(f.Found, fmt.Sprintf("schema id %d", ss.ID)) {
		t.Errorf("doctor once the subject exists: %+v; want ok naming schema id %d:\n%s", f, ss.ID, out)
	}
	record := testenv.Name(t, "shop.Missing")
	code, findings, out = doctor(t, append(base, "--schema-registry-url", regURL, "--subject-name-strategy", "record", "--value-schema-record", record)...)
	if f := findingOf(findings, "value subject "+record); code != 1 || f == nil || f.Severity != sevFail {
		t.Errorf("doctor with a record-name subject that does not exist: exit %d, %+v; want 1 and a failure:\n%s", code, f, out)
	}
	_, findings, out = doctor(t, append(base, "--schema-registry-url", regURL, "--auto-register-schemas", "--value-schema", registryCases[0].v1)...)
	if f := findingOf(findings, "schema registry"); f == nil || f.Severity != sevOK || !strings.Contains(f.Found, "registered at first use") || findingOf(findings, subject) != nil {
		t.Errorf("doctor with auto-registration: %+v; want ok, registered at first use, no subject asked for:\n%s", f, out)
	}
	code, findings, out = doctor(t, append(base, "--schema-registry-url", "http://127.0.0.1:1")...)
	if f := findingOf(findings, "schema registry"); code != 1 || f == nil || f.Severity != sevFail {
		t.Errorf("doctor with no registry at the URL: exit %d, %+v; want 1 and a failure:\n%s", code, f, out)
	}
}

func testRegistryFormat(t *testing.T, regURL, python string, tc registryCase) {
	ctx := t.Context()
	w := newWorld(t)
	brokers := strings.Split(w.brokers, ",")
	other := testenv.Topic(t, 1)
	dlq := testenv.Topic(t, 1)
	cl, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	register := func(subject, text string, typ sr.SchemaType) int {
		t.Helper()
		ss, err := cl.CreateSchema(ctx, subject, sr.Schema{Schema: text, Type: typ})
		if err != nil {
			t.Fatalf("registering under %s: %v", subject, err)
		}
		return ss.ID
	}
	v1 := register(w.topic+"-value", tc.v1, tc.typ)
	register(other+"-value", tc.v1, tc.typ)
	for _, topic := range []string{w.topic, other} {
		register(topic+"-key", `"string"`, sr.TypeAvro)
	}

	// outboxd reaches the registry through a proxy the test can cut.
	u, err := url.Parse(regURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	u.Host = proxy.Addr
	p := w.start(t, "--value-format", tc.format, "--key-format", "avro", "--schema-registry-url", u.String(),
		"--dead-letter-topic", dlq, "--schema-refresh-interval", "1h")
	waitSlot(t, w.pool, w.slot, p)

	insert := func(topic string, payloads ...string) {
		t.Helper()
		for _, pl := range payloads {
			if _, err := w.pool.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, $2)`, topic, pl); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := func(from, to int, extra string) []string {
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, `{"n": `+strconv.Itoa(i)+extra+`}`)
		}
		return out
	}
	insert(w.topic, n(1, 5, "")...)
	// Version 2 comes once the first five are published under version 1.
	var published string
	if err := w.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&published); err != nil {
		t.Fatal(err)
	}
	waitSlotPast(t, w, published)
	insert(w.topic, tc.bad)
	v2 := register(w.topic+"-value", tc.v2, tc.typ)
	insert(w.topic, n(6, 8, `, "note": "v2"`)...)
	insert(w.topic, n(9, 10, "")...)
	// Issue 49, item 6: a row whose topic names no subject the registry
	// knows (a new or mistyped type) is the row's fault: dead-lettered raw,
	// and the pipeline goes on.
	unknown := testenv.Name(t, "unknown")
	insert(unknown, `{"n": 50}`)
	var before string
	if err := w.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	waitSlotPast(t, w, before)

	// The registry goes away: the first record of the other topic needs
	// its subject's schema, and it and the records after it wait.
	if err := proxy.BlackHole(); err != nil {
		t.Fatal(err)
	}
	// waiting is a WAL position inside the transaction that waits: its
	// commit comes after it, so the slot must not be confirmed up to it.
	var waiting string
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, '{"n": 100}')`, other); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	insert(w.topic, n(11, 12, "")...)
	waitFor(t, time.Minute, "a warning that the registry does not answer", func() bool {
		return strings.Contains(p.log(), "schema registry does not answer")
	})
	var confirmedPast bool
	if err := w.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, w.slot, waiting).Scan(&confirmedPast); err != nil {
		t.Fatal(err)
	}
	if confirmedPast {
		t.Error("the slot was confirmed past a record that waits for the registry")
	}
	if recs := consumeTopics(t, brokers, 0, other, w.topic); len(recs) != 10 {
		t.Errorf("%d records published by the time the registry was away a while, want the 10 before the one that waits for it", len(recs))
	}
	proxy.Heal()

	recs := consumeTopics(t, brokers, 13, w.topic, other)
	dead := consumeTopics(t, brokers, 2, dlq)
	schemas := map[int]string{}
	var reqs []decodeRequest
	for _, r := range recs {
		for _, b := range [][]byte{r.Value, r.Key} {
			id, err := schemaID(b)
			if err != nil {
				t.Fatalf("record on %s at offset %d: %v", r.Topic, r.Offset, err)
			}
			if _, ok := schemas[id]; !ok {
				s, err := cl.SchemaByID(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				schemas[id] = s.Schema
			}
			f := tc.format
			if !bytes.Equal(b, r.Value) {
				f = "avro"
			}
			reqs = append(reqs, decodeRequest{Format: f, Schema: schemas[id], Record: b})
		}
	}
	decoded := decodeIndependently(t, python, reqs)
	// Each record, decoded independently, is its row: the payload, the
	// aggregate id; in commit order, under the version current for it.
	var ns []int
	for i, r := range recs {
		val, key := decoded[2*i], decoded[2*i+1]
		if val.Error != "" || key.Error != "" {
			t.Fatalf("decoding record %s: %s %s", recordHeader(r, "id"), val.Error, key.Error)
		}
		var payload string
		var aggregate string
		if err := w.pool.QueryRow(ctx, `SELECT payload::text, aggregate_id::text FROM outbox WHERE id = $1`, recordHeader(r, "id")).Scan(&payload, &aggregate); err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		_ = json.Unmarshal([]byte(payload), &want)
		// The first five rows came before version 2; the bad row made
		// outboxd look again, and every row after it is under version 2.
		n := int(want["n"].(float64))
		wantID := v1
		if n > 5 && r.Topic == w.topic {
			wantID = v2
			if _, ok := want["note"]; !ok && tc.format == "avro" {
				want["note"] = "" // Avro writes version 2's default
			}
		}
		if !reflect.DeepEqual(val.Value, any(want)) {
			t.Errorf("record %s decodes to %v, its row holds %s", recordHeader(r, "id"), val.Value, payload)
		}
		if key.Value != aggregate {
			t.Errorf("record %s key decodes to %v, its row's aggregate id is %s", recordHeader(r, "id"), key.Value, aggregate)
		}
		if r.Topic == w.topic && val.ID != wantID {
			t.Errorf("record %s (%s) under schema id %d, want %d", recordHeader(r, "id"), payload, val.ID, wantID)
		}
		if r.Topic == w.topic {
			ns = append(ns, n)
		}
	}
	// The topic has three partitions and every row its own key: what
	// arrived, not in which order across partitions.
	slices.Sort(ns)
	if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; !reflect.DeepEqual(ns, want) {
		t.Errorf("published n %v, want %v", ns, want)
	}
	if len(dead) != 2 || string(dead[0].Value) != tc.bad || recordHeader(dead[0], "outboxd.dlq.topic") != w.topic ||
		!strings.Contains(recordHeader(dead[0], "outboxd.dlq.error"), `subject "`+w.topic+`-value"`) {
		t.Fatalf("dead letters %d, want the bad row raw naming its subject, then the row of a topic without one: %v", len(dead), dead)
	}
	if string(dead[1].Value) != `{"n": 50}` || recordHeader(dead[1], "outboxd.dlq.topic") != unknown ||
		!strings.Contains(recordHeader(dead[1], "outboxd.dlq.error"), `subject "`+unknown+`-value"`) {
		t.Errorf("the row of a topic without a subject: dead letter %q on %q, error %q; want it raw, naming the subject %s-value",
			dead[1].Value, recordHeader(dead[1], "outboxd.dlq.topic"), recordHeader(dead[1], "outboxd.dlq.error"), unknown)
	}
}

// decodeRequest is one framed value or key for decode.py, with the text
// of the schema its id names.
type decodeRequest struct {
	Format string `json:"format"`
	Schema string `json:"schema"`
	Record []byte `json:"record"` // base64 in JSON, as decode.py reads it
}

// decodedSide is decode.py's answer for one request.
type decodedSide struct {
	ID    int    `json:"id"`
	Value any    `json:"value"`
	Error string `json:"error"`
}

// decodeIndependently decodes reqs with harness/schemacheck/decode.py:
// fastavro, protoc with the protobuf runtime, Python's jsonschema.
func decodeIndependently(t *testing.T, python string, reqs []decodeRequest) []decodedSide {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, r := range reqs {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), python, "../../harness/schemacheck/decode.py")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("decode.py: %v", err)
	}
	var sides []decodedSide
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var d decodedSide
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("decode.py answered %q: %v", line, err)
		}
		sides = append(sides, d)
	}
	if len(sides) != len(reqs) {
		t.Fatalf("decode.py answered %d lines for %d records", len(sides), len(reqs))
	}
	return sides
}

// schemaID is the schema id of a Confluent-framed record's bytes.
func schemaID(b []byte) (int, error) {
	if len(b) < 5 || b[0] != 0 {
		return 0, errNotFramed
	}
	return int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4]), nil
}

var errNotFramed = errors.New("not in the Confluent wire format")

// testDebeziumLayoutWithAvro: --layout debezium with --value-format avro
// and --key-format avro writes what Debezium's EventRouter writes through
// an Avro converter for a jsonb payload and a varchar aggregate id: the
// payload's text under a nullable string schema (io.debezium.data.Json)
// and the key under a string schema, each framed with the id of the
// schema registered for its subject; fastavro reads them back.
func testDebeziumLayoutWithAvro(t *testing.T, regURL, python string) {
	ctx := t.Context()
	db, brokers := testenv.Database(t), testenv.Brokers(t)
	w := &world{url: db, brokers: strings.Join(brokers, ","), slot: testenv.Name(t, "slot")}
	var err error
	if w.pool, err = pgxpoolNew(t, db); err != nil {
		t.Fatal(err)
	}
	suffix := strings.ToLower(testenv.Name(t, "t"))
	topic := testenv.CreateTopic(t, brokers, "outbox.event."+suffix, 1)
	if _, err := w.pool.Exec(ctx, `CREATE TABLE outboxevent (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
		aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(builtBinary, "migrate", "--database-url", db, "--table", "public.outboxevent", "--slot", w.slot, "--layout", "debezium").CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate --layout debezium: %v\n%s", err, out)
	}
	cl, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	const valueSchema = `["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]`
	vs, err := cl.CreateSchema(ctx, topic+"-value", sr.Schema{Schema: valueSchema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSchema(ctx, topic+"-key", sr.Schema{Schema: `"string"`}); err != nil {
		t.Fatal(err)
	}
	p := w.start(t, "--layout", "debezium", "--value-format", "avro", "--key-format", "avro", "--schema-registry-url", regURL)
	waitSlot(t, w.pool, w.slot, p)
	if _, err := w.pool.Exec(ctx, `INSERT INTO outboxevent VALUES
		('22222222-2222-4222-8222-222222222222', $1, 'o-1', 'OrderCreated', '{"total": 19.90, "items": [1, 2]}'),
		('33333333-3333-4333-8333-333333333333', $1, 'o-2', 'OrderPaid', '{"paid": true}')`, suffix); err != nil {
		t.Fatal(err)
	}
	recs := consumeTopics(t, brokers, 2, topic)
	var reqs []decodeRequest
	for _, r := range recs {
		reqs = append(reqs, decodeRequest{Format: "avro", Schema: valueSchema, Record: r.Value}, decodeRequest{Format: "avro", Schema: `"string"`, Record: r.Key})
	}
	decoded := decodeIndependently(t, python, reqs)
	for i, r := range recs {
		val, key := decoded[2*i], decoded[2*i+1]
		var payload, aggregate string
		if err := w.pool.QueryRow(ctx, `SELECT payload::text, aggregateid FROM outboxevent WHERE id = $1`, recordHeader(r, "id")).Scan(&payload, &aggregate); err != nil {
			t.Fatal(err)
		}
		if val.Error != "" || val.Value != payload || val.ID != vs.ID {
			t.Errorf("record %s: value decodes to %v (schema id %d) %s, want the payload's text %s under id %d", recordHeader(r, "id"), val.Value, val.ID, val.Error, payload, vs.ID)
		}
		if key.Error != "" || key.Value != aggregate {
			t.Errorf("record %s: key decodes to %v %s, want %s", recordHeader(r, "id"), key.Value, key.Error, aggregate)
		}
	}
}

func pgxpoolNew(t *testing.T, url string) (*pgxpool.Pool, error) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err == nil {
		t.Cleanup(pool.Close)
	}
	return pool, err
}

// testStopAtAMisfit: with exactly-once delivery (so no dead-letter topic),
// a payload that does not fit its schema stops the run with an error
// naming the row and the schema, after publishing every record before it
// in committed Kafka transactions and none after it; a restart stops at
// the same row again: nothing is skipped.
func testStopAtAMisfit(t *testing.T, regURL, python string) {
	ctx := t.Context()
	w := newWorld(t)
	cl, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	const schema = `{"type":"record","name":"Event","namespace":"shop","fields":[{"name":"n","type":"long"}]}`
	ss, err := cl.CreateSchema(ctx, w.topic+"-value", sr.Schema{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range []string{`{"n": 1}`, `{"n": 2}`, `{"n": "three"}`, `{"n": 4}`} {
		if _, err := w.pool.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, $2)`, w.topic, pl); err != nil {
			t.Fatal(err)
		}
	}
	var badID string
	if err := w.pool.QueryRow(ctx, `SELECT id::text FROM outbox WHERE payload->>'n' = 'three'`).Scan(&badID); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		p := w.start(t, "--delivery", "exactly-once", "--value-format", "avro", "--schema-registry-url", regURL)
		if code := p.wait(t, 2*time.Minute); code != 1 {
			t.Fatalf("run %d exited %d, want 1", run, code)
		}
		for _, want := range []string{"outbox id " + badID, "schema of subject", w.topic + "-value", "$.n: want an integer"} {
			if !strings.Contains(p.log(), want) {
				t.Errorf("run %d's log does not name %s:\n%s", run, want, tail(p.log(), 10))
			}
		}
	}
	recs := consumeTopicsWith(t, strings.Split(w.brokers, ","), 2, []kgo.Opt{readCommitted}, w.topic)
	var reqs []decodeRequest
	for _, r := range recs {
		reqs = append(reqs, decodeRequest{Format: "avro", Schema: schema, Record: r.Value})
	}
	var ns []float64
	for i, d := range decodeIndependently(t, python, reqs) {
		m, _ := d.Value.(map[string]any)
		if d.Error != "" || d.ID != ss.ID || m == nil {
			t.Fatalf("record %d decodes to %+v", i, d)
		}
		ns = append(ns, m["n"].(float64))
	}
	slices.Sort(ns)
	if !reflect.DeepEqual(ns, []float64{1, 2}) {
		t.Errorf("committed records hold n %v, want 1 and 2 (the rows before the one that does not fit, once each)", ns)
	}
}

// testAutoRegisterUnderTopicRecord: with --auto-register-schemas and the
// topic-record strategy, outboxd registers --value-schema-file under
// "<topic>-<record name>" in the real registry and encodes with it.
func testAutoRegisterUnderTopicRecord(t *testing.T, regURL, python string) {
	ctx := t.Context()
	w := newWorld(t)
	const schema = `{"type":"record","name":"Event","namespace":"shop","fields":[{"name":"n","type":"long"}]}`
	file := filepath.Join(t.TempDir(), "event.avsc")
	if err := os.WriteFile(file, []byte(schema+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := w.start(t, "--value-format", "avro", "--schema-registry-url", regURL, "--auto-register-schemas", "--value-schema-file", file,
		"--subject-name-strategy", "topic-record", "--value-schema-record", "shop.Event")
	waitSlot(t, w.pool, w.slot, p)
	for _, pl := range []string{`{"n": 1}`, `{"n": 2}`} {
		if _, err := w.pool.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, $2)`, w.topic, pl); err != nil {
			t.Fatal(err)
		}
	}
	recs := consumeTopics(t, strings.Split(w.brokers, ","), 2, w.topic)
	cl, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cl.SchemaByVersion(ctx, w.topic+"-shop.Event", -1)
	if err != nil {
		t.Fatalf("the subject %s-shop.Event: %v", w.topic, err)
	}
	var reqs []decodeRequest
	for _, r := range recs {
		reqs = append(reqs, decodeRequest{Format: "avro", Schema: ss.Schema.Schema, Record: r.Value})
	}
	for i, d := range decodeIndependently(t, python, reqs) {
		if d.Error != "" || d.ID != ss.ID {
			t.Errorf("record %d: %+v, want it under the registered schema id %d", i, d, ss.ID)
		}
	}
}
