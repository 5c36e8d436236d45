package config

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runLike builds flags as outboxd run does (cmd/outboxd's runFlags): the
// newFlags of these tests.
func runLike(c *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs, GroupDatabase, GroupRunTable, GroupSlot, GroupPublication, GroupCreateSlot, GroupBackfill, GroupBackfillOrder, GroupColumns,
		GroupPump, GroupKafka, GroupDelivery, GroupRegistry, GroupStream, GroupOps, GroupLog)
	return fs
}

// writeFile writes content to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// processFlags is a command's process settings parsed from args and env,
// as a command that takes a pipelines file parses them.
func processFlags(t *testing.T, args []string, env map[string]string) (*Config, *flag.FlagSet) {
	t.Helper()
	c := Default()
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("config", "", "the pipelines file")
	c.RegisterProcess(fs)
	if err := Parse(fs, args, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	return &c, fs
}

// TestLoadFileSettings: a pipeline's key wins over the same top-level key,
// which wins over the environment variable, which wins over the default;
// lists are joined with commas; ${VAR} is expanded and $$ is a $; a -file
// key reads its file; process settings at the top level reach the
// command's process flags unless its command line set them.
func TestLoadFileSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	urlFile := writeFile(t, dir, "orders-url", "postgres://orders:pg-s3cret@db-orders:5432/orders\n")
	registryPassword := writeFile(t, dir, "registry-password", "reg-s3cret\n")
	path := writeFile(t, dir, "pipelines.yaml", `
# defaults for every pipeline
brokers: [kafka-1:9092, kafka-2:9092]
compression: zstd
linger: 10ms
delivery: at-least-once
metrics-addr: :9187
log-level: debug
pipelines:
  - name: orders
    database-url-file: `+urlFile+`
    slot: outboxd_orders
    linger: 20ms
    header-columns:
      - type
      - tenant
    max-in-flight-bytes: 2097152
    allow-auto-topic-creation: true
    value-format: avro
    schema-registry-url: https://registry:8081
    schema-registry-username: outboxd
    schema-registry-password-file: `+registryPassword+`
  - name: billing.eu-1
    database-url: ${BILLING_DATABASE_URL}
    publication: billing_outbox
    layout: debezium
    debezium-route-topic-replacement: billing.$${routedByValue}
    kafka-sasl-username: $$user$
`)
	env := map[string]string{
		"BILLING_DATABASE_URL":          "postgres://billing:bill-s3cret@db-billing/billing",
		"OUTBOXD_LINGER":                "5ms",
		"OUTBOXD_COMPRESSION":           "lz4",
		"OUTBOXD_MAX_IN_FLIGHT_RECORDS": "77",
		"OUTBOXD_LOG_FORMAT":            "json",
	}
	getenv := func(k string) string { return env[k] }
	proc, procFlags := processFlags(t, []string{"--log-level", "warn"}, env)

	f, err := LoadFile(path, procFlags, runLike, getenv)
	if err != nil {
		t.Fatalf("LoadFile = %v", err)
	}
	if len(f.Pipelines) != 2 || f.Pipelines[0].Name != "orders" || f.Pipelines[1].Name != "billing.eu-1" {
		t.Fatalf("pipelines %+v, want orders and billing.eu-1", f.Pipelines)
	}
	orders, billing := f.Pipelines[0].Config, f.Pipelines[1].Config
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"orders: database URL from its file, newline trimmed", orders.Stream.DatabaseURL, "postgres://orders:pg-s3cret@db-orders:5432/orders"},
		{"billing: database URL from ${BILLING_DATABASE_URL}", billing.Stream.DatabaseURL, env["BILLING_DATABASE_URL"]},
		{"orders: its own linger over the top level's", orders.Kafka.Linger, 20 * time.Millisecond},
		{"billing: the top level's linger over the environment's", billing.Kafka.Linger, 10 * time.Millisecond},
		{"the top level's compression over the environment's", billing.Kafka.Compression, "zstd"},
		{"the environment's in-flight records over the default", orders.Pump.MaxInFlightRecords, 77},
		{"the default where nothing sets it", orders.Stream.StatusInterval, Default().Stream.StatusInterval},
		{"orders: slot", orders.Stream.Slot, "outboxd_orders"},
		{"billing: default slot", billing.Stream.Slot, Default().Stream.Slot},
		{"billing: publication", billing.Stream.Publication, "billing_outbox"},
		{"a list of brokers", strings.Join(billing.Kafka.Brokers, "|"), "kafka-1:9092|kafka-2:9092"},
		{"a list of header columns", strings.Join(orders.Stream.Columns.HeaderColumns, "|"), "type|tenant"},
		{"a number", orders.Pump.MaxInFlightBytes, 2097152},
		{"a boolean", orders.Kafka.AllowAutoTopicCreation, true},
		{"orders: its value format", orders.Registry.Value.Format, "avro"},
		{"orders: the registry's password from its file", orders.Registry.Password, "reg-s3cret"},
		{"billing: no schema format", billing.Registry.Value.Format, "json"},
		{"$${...} is the literal text ${...}", billing.Shape.DZ.RouteTopicReplacement, "billing.${routedByValue}"},
		{"$$ is a literal $, a $ alone itself", billing.Kafka.SASL.Username, "$user$"},
		{"the layout's defaults apply (ApplyLayout)", billing.Stream.Columns.Key, "aggregateid"},
		{"process: the top level sets what the command line did not", proc.Process.MetricsAddr, ":9187"},
		{"process: the command line wins over the top level", proc.Process.LogLevel, "warn"},
		{"process: the environment wins over the top level", proc.Process.LogFormat, "json"},
		{"process settings reach each pipeline's Config", billing.Process.MetricsAddr + " " + billing.Process.LogLevel, ":9187 warn"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	var dump bytes.Buffer
	for _, p := range f.Pipelines {
		slog.New(slog.NewTextHandler(&dump, nil)).Info("starting", "pipeline", p.Name, "config", Dump(p.Flags))
	}
	if strings.Contains(dump.String(), "s3cret") || !strings.Contains(dump.String(), "database_url=\"host=db-orders:5432 database=orders user=orders\"") {
		t.Errorf("the startup dump of the pipelines shows a secret or lacks the database:\n%s", dump.String())
	}
}

// TestLoadFileProblems: every kind of problem a pipelines file can have is
// reported, naming the file's line or the pipeline and the key, and all of
// a file's problems at once.
func TestLoadFileProblems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	url := writeFile(t, dir, "url", "postgres://app:pg-s3cret@db/app\n")
	const valid = "brokers: k:9092\n"
	tests := []struct {
		name    string
		file    string
		env     map[string]string
		args    []string // the command's process flags
		want    []string // in LoadFile's error; nil: none
		notWant []string // never in it
	}{
		{name: "valid", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://db/a\n"},
		{name: "unknown keys, with the nearest one", file: valid + "slto: x\npipelines:\n  - name: a\n    database-url: postgres://db/a\n    publicaton: p\n    frobnicate: 1\n",
			want: []string{`pipelines.yaml:2: unknown key "slto" (did you mean slot?)`,
				`pipelines.yaml:6: pipeline "a": unknown key "publicaton" (did you mean publication?)`,
				`pipelines.yaml:7: pipeline "a": unknown key "frobnicate": the keys are run's flags`}},
		{name: "duplicate keys", file: valid + "brokers: k2:9092\npipelines:\n  - name: a\n    database-url: postgres://db/a\n    slot: s\n    slot: t\n",
			want: []string{`pipelines.yaml:2: duplicate key "brokers" (first at line 1)`, `pipelines.yaml:7: pipeline "a": duplicate key "slot" (first at line 6)`}},
		{name: "duplicate pipeline names", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://db/a\n  - name: a\n    database-url: postgres://db/b\n",
			want: []string{`pipelines.yaml:5: pipeline name "a" is taken by the pipeline at line 3`}},
		{name: "no name, an empty name, an invalid name", file: valid + "pipelines:\n  - database-url: postgres://db/a\n  - name: ''\n    database-url: postgres://db/b\n  - name: orders/eu\n    database-url: postgres://db/c\n",
			want: []string{"pipelines.yaml:3: pipeline 1 (line 3) has no name", `pipelines.yaml:4: pipeline 2 (line 4): name "": want 1 to 63 letters`,
				`pipelines.yaml:6: pipeline 3 (line 6): name "orders/eu": want 1 to 63 letters`}},
		{name: "a name too long", file: valid + "pipelines:\n  - name: " + strings.Repeat("a", 64) + "\n    database-url: postgres://db/a\n",
			want: []string{"pipelines.yaml:3: pipeline 1 (line 3): name", "want 1 to 63 letters"}},
		{name: "a pipeline that is not a mapping", file: valid + "pipelines:\n  - orders\n", want: []string{"pipelines.yaml:3: pipeline 1 (line 3): want a mapping of settings with a name, not a single value"},
			notWant: []string{"required"}},
		{name: "an empty list of pipelines", file: valid + "pipelines: []\n", want: []string{"pipelines.yaml:2: pipelines: the list is empty"}},
		{name: "pipelines without a list", file: valid + "pipelines:\n", want: []string{"pipelines.yaml:2: pipelines: want a list of pipelines, not null"}},
		{name: "no pipelines", file: valid, want: []string{"pipelines.yaml:1: no pipelines: list them under pipelines:"}},
		{name: "values that are no values", file: valid + "linger:\nheader-columns: [a, [b]]\npipelines:\n  - name: a\n    database-url: postgres://db/a\n    slot: {x: 1}\n    publication: ~\n",
			want: []string{"pipelines.yaml:2: linger: want a value, not null (no value)", "pipelines.yaml:3: header-columns: want each item of the list a value, not a list",
				`pipelines.yaml:7: pipeline "a": slot: want a value or a list of values, not a mapping`, `pipelines.yaml:8: pipeline "a": publication: want a value, not null`}},
		{name: "a process setting in a pipeline", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://db/a\n    metrics-addr: :9187\n    log-level: debug\n",
			want: []string{`pipelines.yaml:5: pipeline "a": metrics-addr is a process setting; set it at the top level of the file`,
				`pipelines.yaml:6: pipeline "a": log-level is a process setting; set it at the top level of the file`}},
		{name: "a name at the top level", file: valid + "name: x\npipelines:\n  - name: a\n    database-url: postgres://db/a\n",
			want: []string{"pipelines.yaml:2: name: a pipeline's name goes in its entry of the pipelines list"}},
		{name: "unset and empty variables", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://u:${DB_PASSWORD}@db/a\n    debezium-route-topic-replacement: x.${routedByValue}\n    slot: ${EMPTY}\n",
			env: map[string]string{"EMPTY": ""},
			want: []string{`pipelines.yaml:4: pipeline "a": database-url: environment variable DB_PASSWORD is not set or is empty (for the literal text ${DB_PASSWORD}`,
				"for Debezium's ${routedByValue} itself, write $${routedByValue}", `pipelines.yaml:6: pipeline "a": slot: environment variable EMPTY is not set`},
			notWant: []string{"database-url: required"}},
		{name: "${ that names no variable", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://u:p${w-rd@db/a\n    slot: x${a b}\n",
			want:    []string{`pipeline "a": database-url: a ${ without its closing }`, `pipeline "a": slot: a ${...} that names no environment variable`},
			notWant: []string{"w-rd", "a b", "database-url: required"}},
		{name: "a value its flag refuses", file: valid + "linger: fast\npipelines:\n  - name: a\n    database-url: postgres://db/a\n    max-in-flight-records: many\n",
			want: []string{`pipelines.yaml:2: linger: "fast": parse error (want a value like its default, "0s")`,
				`pipelines.yaml:6: pipeline "a": max-in-flight-records: "many": parse error`},
			notWant: []string{"must be positive"}},
		{name: "validation names the pipeline and key, and where a value came from", file: "compression: brotli\npipelines:\n  - name: a\n    slot: ''\n    database-url: postgres://db/a\n",
			env: map[string]string{"OUTBOXD_BROKERS": "nocolon", "OUTBOXD_LINGER": "slow"},
			want: []string{`pipeline "a": slot: must not be empty`, `pipeline "a": compression (top level, line 1): "brotli" is not one of`,
				`pipeline "a": brokers (OUTBOXD_BROKERS): `, "nocolon", `OUTBOXD_LINGER: "slow": parse error (want a value like its default, "0s")`}},
		{name: "process settings at the top level and on the command line", file: valid + "metrics-addr: nope\nmax-procs: -1\npprof: maybe\npipelines:\n  - name: a\n    database-url: postgres://db/a\n",
			args: []string{"--log-level", "loud"},
			want: []string{`pipelines.yaml:2: metrics-addr: "nope" is not HOST:PORT or :PORT`, "pipelines.yaml:3: max-procs: must not be negative",
				`pipelines.yaml:4: pprof: "maybe": parse error`, `--log-level (OUTBOXD_LOG_LEVEL): "loud" is not debug, info, warn or error`}},
		{name: "a setting and its file in one pipeline", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://db/a\n    database-url-file: " + url + "\n",
			want: []string{`pipeline "a": database-url and database-url-file: give one of them, not both`}, notWant: []string{"s3cret"}},
		{name: "a pipeline's setting overrides the top level's file", file: valid + "database-url-file: " + url + "\npipelines:\n  - name: a\n    database-url: postgres://db/a\n  - name: b\n    slot: b\n"},
		{name: "a pipeline's file overrides the environment's setting", file: valid + "pipelines:\n  - name: a\n    database-url-file: " + url + "\n",
			env: map[string]string{"OUTBOXD_DATABASE_URL": "postgres://db/env"}},
		{name: "an unreadable secret file", file: valid + "pipelines:\n  - name: a\n    database-url-file: " + missing + "\n    kafka-sasl-password-file: " + dir + "\n",
			want: []string{`pipelines.yaml:4: pipeline "a": database-url-file: reading ` + missing + ": no such file or directory",
				`pipelines.yaml:5: pipeline "a": kafka-sasl-password-file: reading ` + dir + ": is a directory"},
			notWant: []string{"database-url: required"}},
		{name: "a database URL that would show its password", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://app:pg-s3cret@SECOND@db/app\n",
			want: []string{`pipeline "a": database-url: is ambiguous`}, notWant: []string{"s3cret", "SECOND"}},
		{name: "one slot of one database", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://u@DB:5432/app\n  - name: b\n    database-url: host=db user=v password=x dbname=app\n",
			want: []string{`pipeline "a" and pipeline "b": both read slot outboxd of database app on db:5432`}},
		{name: "one slot name in two databases of a server", file: valid + "slot: shared\npipelines:\n  - name: a\n    database-url: postgres://db/app\n  - name: b\n    database-url: postgres://db/other\n",
			want: []string{`pipeline "a" and pipeline "b": both use slot shared on db:5432 (databases app and other): slot names are per server`}},
		{name: "one slot name on two servers", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://db1/app\n  - name: b\n    database-url: postgres://db2/app\n"},
		{name: "one transactional id", file: valid + "delivery: exactly-once\ntransactional-id: outbox\npipelines:\n  - name: a\n    database-url: postgres://db1/app\n  - name: b\n    database-url: postgres://db2/app\n",
			want: []string{`pipeline "a" and pipeline "b": both deliver exactly-once with transactional-id "outbox"`}},
		// Issue 49, item 13: a named source is the idempotency key's
		// first half; two databases under one would dedupe each other.
		{name: "one source for two databases", file: valid + "source: orders\npipelines:\n  - name: a\n    database-url: postgres://db1/app\n  - name: b\n    database-url: postgres://db2/app\n",
			want: []string{`pipeline "a" and pipeline "b": both name source "orders" from different databases`}},
		{name: "one source for one database", file: valid + "source: orders\npipelines:\n  - name: a\n    database-url: postgres://db1/app\n    slot: a\n  - name: b\n    database-url: postgres://db1/app\n    slot: b\n"},
		{name: "a source with a control character", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://db1/app\n    source: \"a\\tb\"\n",
			want: []string{"source", "a control character"}},
		{name: "one transactional id, at least once", file: valid + "transactional-id: outbox\npipelines:\n  - name: a\n    database-url: postgres://db1/app\n  - name: b\n    database-url: postgres://db2/app\n    delivery: exactly-once\n"},
		{name: "merge keys", file: valid + "pipelines:\n  - &base\n    name: a\n    database-url: postgres://db/a\n  - <<: *base\n    name: b\n",
			want: []string{`pipelines.yaml:6: pipeline "b": <<: merge keys are not supported`}},
		{name: "aliases", file: "brokers: &k [k1:9092, k2:9092]\npipelines:\n  - name: a\n    database-url: postgres://db/a\n    header-columns: *k\n"},
		{name: "YAML that does not parse", file: "pipelines: [\n", want: []string{"pipelines.yaml:1: did not find expected node content"}},
		// Issue 49, item 25: yaml.v3 names the line where the construct
		// around a fault begins: an indentation fault in a pipeline was
		// reported at the pipelines: line.
		{name: "an indentation fault", file: "brokers: k:9092\npipelines:\n  - name: a\n    database-url: postgres://db/a\n  - name: b\n    database-url: postgres://db/b\n   slot: b\n",
			want: []string{"pipelines.yaml:7: did not find expected '-' indicator (in what begins on line 2)"}},
		{name: "a value indented under a value", file: "brokers: k:9092\npipelines:\n  - name: a\n    database-url: postgres://db/a\n    slot: a\n      publication: p\n",
			want: []string{"pipelines.yaml:6: mapping values are not allowed in this context"}},
		{name: "a quoted value never closed", file: "brokers: k:9092\npipelines:\n  - name: a\n    database-url: 'postgres://db/a\n    slot: a\n",
			want: []string{"pipelines.yaml:4: found unexpected end of stream"}},
		{name: "an empty file", file: "# nothing\n", want: []string{"pipelines.yaml: the file is empty"}},
		{name: "a file that is one value", file: "postgres://app:pg-s3cret@db/app\n", want: []string{"pipelines.yaml:1: want a mapping of settings with a pipelines list, not a single value"},
			notWant: []string{"s3cret"}},
		{name: "two documents", file: valid + "pipelines:\n  - name: a\n    database-url: postgres://db/a\n---\nslot: x\n", want: []string{"pipelines.yaml:5: a second YAML document"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, t.TempDir(), "pipelines.yaml", tt.file)
			_, proc := processFlags(t, tt.args, nil)
			_, err := LoadFile(path, proc, runLike, func(k string) string { return tt.env[k] })
			if tt.want == nil {
				if err != nil {
					t.Fatalf("LoadFile = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("LoadFile = nil, want problems")
			}
			msg := strings.ReplaceAll(err.Error(), path, "pipelines.yaml")
			t.Logf("LoadFile's error:\n%s", msg)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("LoadFile's error lacks %q:\n%s", w, msg)
				}
			}
			for _, nw := range tt.notWant {
				if strings.Contains(msg, nw) {
					t.Errorf("LoadFile's error shows %q:\n%s", nw, msg)
				}
			}
		})
	}
}
