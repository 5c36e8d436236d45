package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/harness/testenv"
)

// pipelinesFile writes a pipelines file for a test and returns its path.
func pipelinesFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pipelines.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runOutboxd runs outboxd in-process with args and env as its whole
// environment.
func runOutboxd(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

// withPassword is url with a password that trust authentication ignores:
// what no output may show.
func withPassword(t *testing.T, raw, password string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

func TestValidateConfig(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "orders-url")
	if err := os.WriteFile(secret, []byte("postgres://orders:Zq9orders@db-orders:5433/orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	valid := pipelinesFile(t, `
brokers: [kafka-1:9092, kafka-2:9092]
metrics-addr: :9187
pipelines:
  - name: orders
    database-url-file: `+secret+`
    slot: outboxd_orders
  - name: billing
    database-url: ${BILLING_DATABASE_URL}
    delivery: exactly-once
`)
	invalid := pipelinesFile(t, `
brokers: kafka-1:9092
slto: x
pipelines:
  - name: orders
    database-url: postgres://db/orders
    metrics-addr: :9187
  - name: orders
    database-url: ${BILLING_DATABASE_URL}
    slot: ''
`)
	env := map[string]string{"BILLING_DATABASE_URL": "postgres://billing:Zq9billing@db-billing/billing"}
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stdout []string // in this order
		stderr []string
	}{
		{name: "valid", args: []string{"--config", valid}, env: env, code: exitOK,
			stdout: []string{"pipeline", "database", "slot", "delivery",
				"orders", "host=db-orders:5433 database=orders user=orders", "outboxd_orders", "at-least-once",
				"billing", "host=db-billing:5432 database=billing user=billing", "outboxd", "exactly-once"}},
		{name: "every problem at once", args: []string{"--config", invalid, "--max-procs", "-2"}, code: exitUsage,
			stderr: []string{"outboxd validate: invalid pipelines file " + invalid + ":",
				invalid + `:3: unknown key "slto" (did you mean slot?)`,
				invalid + `:7: pipeline "orders": metrics-addr is a process setting; set it at the top level of the file`,
				invalid + `:8: pipeline name "orders" is taken by the pipeline at line 5`,
				invalid + `:9: pipeline "orders" (line 8): database-url: environment variable BILLING_DATABASE_URL is not set`,
				"--max-procs (OUTBOXD_MAX_PROCS): must not be negative",
				`pipeline "orders" (line 8): slot: must not be empty`}},
		{name: "the file from the environment", env: map[string]string{"OUTBOXD_CONFIG": invalid}, code: exitUsage,
			stderr: []string{"outboxd validate: invalid pipelines file " + invalid}},
		{name: "no file", code: exitUsage, stderr: []string{"outboxd validate: --config FILE is required"}},
		{name: "a file that is not there", args: []string{"--config", invalid + ".missing"}, code: exitUsage,
			stderr: []string{"reading pipelines file " + invalid + ".missing: no such file or directory"}},
		{name: "the file as an argument", args: []string{valid}, code: exitUsage, stderr: []string{"unexpected argument " + valid + ": give the file with --config"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runOutboxd(t, tt.env, append([]string{"validate"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			rest := stdout
			for _, w := range tt.stdout {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("stdout lacks %q after what came before:\n%s", w, stdout)
					break
				}
				rest = rest[i+len(w):]
			}
			for _, w := range tt.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stdout+stderr, "Zq9") {
				t.Errorf("the output shows a password:\n%s%s", stdout, stderr)
			}
		})
	}
}

// TestMigrateConfigMigratesEveryPipeline: migrate --config migrates each
// pipeline's database with its own settings, one after another, saying
// which pipeline; one that fails does not stop the others, and is
// reported by name with exit 1.
func TestMigrateConfigMigratesEveryPipeline(t *testing.T) {
	t.Parallel()
	orders, billing := testenv.Database(t), testenv.Database(t)
	gone, err := url.Parse(orders)
	if err != nil {
		t.Fatal(err)
	}
	gone.Path = "/" + testenv.Name(t, "gone") // no such database
	slotOrders, slotBilling, slotGone := testenv.Name(t, "s"), testenv.Name(t, "s"), testenv.Name(t, "s")
	path := pipelinesFile(t, fmt.Sprintf(`
brokers: 127.0.0.1:1
log-format: json
pipelines:
  - name: orders
    database-url: %s
    slot: %s
  - name: gone
    database-url: %s
    slot: %s
  - name: billing
    database-url: ${BILLING_DATABASE_URL}
    slot: %s
    table: billing.events
    publication: billing_outbox
`, withPassword(t, orders, "Zq9orders"), slotOrders, gone, slotGone, slotBilling))
	conn := connect(t, billing)
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA billing"); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BILLING_DATABASE_URL": withPassword(t, billing, "Zq9billing")}

	code, stdout, stderr := runOutboxd(t, env, "migrate", "--config", path)
	if code != exitError {
		t.Errorf("migrate --config with a pipeline whose database is gone: exit %d, want %d\n%s%s", code, exitError, stdout, stderr)
	}
	for _, want := range []string{`"msg":"migrating","pipeline":"orders"`, `"msg":"migrating","pipeline":"gone"`, `"msg":"migrating","pipeline":"billing"`,
		"outboxd migrate: 1 of 3 pipelines failed:\npipeline gone: "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("migrate's output lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stdout+stderr, "Zq9") {
		t.Errorf("migrate's output shows a password:\n%s%s", stdout, stderr)
	}
	for _, db := range []struct{ url, table, publication, slot string }{
		{orders, "public.outbox", "outboxd", slotOrders},
		{billing, "billing.events", "billing_outbox", slotBilling},
	} {
		var table, publication, slotName bool
		if err := connect(t, db.url).QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL,
				EXISTS (SELECT FROM pg_publication_tables WHERE pubname = $2 AND format('%I.%I', schemaname, tablename) = $1),
				EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $3 AND database = current_database())`,
			db.table, db.publication, db.slot).Scan(&table, &publication, &slotName); err != nil {
			t.Fatal(err)
		}
		if !table || !publication || !slotName {
			t.Errorf("%s: table %s %v, in publication %s %v, slot %s %v: want all there", db.url, db.table, table, db.publication, publication, db.slot, slotName)
		}
	}
}

// TestMigrateConfigPrintsEachPipelinesSQL: migrate --config --print-sql
// prints each pipeline's SQL under a header naming it, without connecting,
// with migrate's own flags beside --config applied to every pipeline;
// flags that belong in the file are refused beside it.
func TestMigrateConfigPrintsEachPipelinesSQL(t *testing.T) {
	t.Parallel()
	const pipelines = `
brokers: kafka:9092
pipelines:
  - name: orders
    database-url: postgres://app:Zq9orders@db-orders/orders
    slot: outboxd_orders
  - name: billing
    database-url: postgres://app@db-billing/billing
    slot: outboxd_billing
    table: billing.events
`
	path := pipelinesFile(t, pipelines)
	debezium := pipelinesFile(t, pipelines+"    layout: debezium\n")
	tests := []struct {
		name    string
		args    []string
		code    int
		want    []string // in stdout, in this order (exit 0), or in stderr
		notWant []string // in stdout
	}{
		{name: "each pipeline under its header", args: []string{"--config", path}, want: []string{
			"-- ==== pipeline orders: host=db-orders:5432 database=orders user=app ====\n", "schema for table public.outbox, publication outboxd, slot outboxd_orders",
			"-- migration 0001_outbox_table", `CREATE TABLE IF NOT EXISTS "public"."outbox"`, "pg_create_logical_replication_slot('outboxd_orders'",
			"-- ==== pipeline billing: host=db-billing:5432 database=billing user=app ====\n", "schema for table billing.events, publication outboxd, slot outboxd_billing",
			`CREATE TABLE IF NOT EXISTS "billing"."events"`, "pg_create_logical_replication_slot('outboxd_billing'"}},
		{name: "own tables, no slots", args: []string{"--config", path, "--own-table", "--create-slot=false"},
			want:    []string{"pipeline orders", "schema for table public.outbox", "pipeline billing", "schema for table billing.events"},
			notWant: []string{"-- migration 0001_outbox_table", "pg_create_logical_replication_slot"}},
		{name: "partitioned tables", args: []string{"--config", path, "--partitioned"},
			want: []string{"pipeline orders", "migrate --partitioned: partitioned by day", "pipeline billing", "migrate --partitioned: partitioned by day"}},
		{name: "partitioned, and a pipeline with the Debezium layout", args: []string{"--config", debezium, "--partitioned"}, code: exitUsage,
			want: []string{`pipeline "billing": --partitioned (OUTBOXD_PARTITIONED): not with --own-table or --layout debezium`}},
		{name: "flags that belong in the file", args: []string{"--config", path, "--slot", "x", "--table", "y"}, code: exitUsage,
			want: []string{"--slot, --table beside --config: set it in the pipelines file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runOutboxd(t, nil, append([]string{"migrate", "--print-sql"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\n%s", code, tt.code, stderr)
			}
			if code != exitOK {
				for _, w := range tt.want {
					if !strings.Contains(stderr, w) {
						t.Errorf("stderr lacks %q:\n%s", w, stderr)
					}
				}
				return
			}
			rest := stdout
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("--print-sql lacks %q after what came before:\n%s", w, stdout)
				}
				rest = rest[i+len(w):]
			}
			for _, nw := range append(tt.notWant, "Zq9") {
				if strings.Contains(stdout, nw) {
					t.Errorf("--print-sql shows %q:\n%s", nw, stdout)
				}
			}
		})
	}
}

// TestStatusConfigShowsEveryPipeline: status --config shows each
// pipeline's slot under its name, and exits 1 when any slot is missing,
// naming that pipeline; with --json, a list of pipelines and statuses.
func TestStatusConfigShowsEveryPipeline(t *testing.T) {
	t.Parallel()
	orders, billing := testenv.Database(t), testenv.Database(t)
	slotOrders, slotBilling := testenv.Name(t, "s"), testenv.Name(t, "s")
	both := pipelinesFile(t, fmt.Sprintf(`
brokers: 127.0.0.1:1
pipelines:
  - name: orders
    database-url: %s
    slot: %s
  - name: billing
    database-url: %s
    slot: %s
`, withPassword(t, orders, "Zq9orders"), slotOrders, billing, slotBilling))
	onlyOrders := pipelinesFile(t, fmt.Sprintf("brokers: 127.0.0.1:1\npipelines:\n  - name: orders\n    database-url: %s\n    slot: %s\n", orders, slotOrders))
	if code, stdout, stderr := runOutboxd(t, nil, "migrate", "--config", onlyOrders); code != exitOK {
		t.Fatalf("migrate: exit %d\n%s%s", code, stdout, stderr)
	}

	code, stdout, stderr := runOutboxd(t, nil, "status", "--config", both)
	if code != exitError {
		t.Errorf("status --config with billing's slot missing: exit %d, want %d", code, exitError)
	}
	rest := stdout
	for _, want := range []string{"pipeline orders (host=", "slot ", slotOrders, "plugin ", "pgoutput", "publication ", "outboxd",
		"\n\npipeline billing (host=", "slot ", slotBilling, "exists ", "no"} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("status lacks %q after what came before:\n%s", want, stdout)
		}
		rest = rest[i+len(want):]
	}
	if want := "outboxd status: pipeline billing: replication slot " + slotBilling + " does not exist"; !strings.Contains(stderr, want) || strings.Contains(stderr, "pipeline orders") {
		t.Errorf("status's errors: want %q, and nothing about orders:\n%s", want, stderr)
	}
	if strings.Contains(stdout+stderr, "Zq9") {
		t.Errorf("status shows a password:\n%s%s", stdout, stderr)
	}

	code, stdout, _ = runOutboxd(t, nil, "status", "--config", both, "--json")
	var got []struct {
		Pipeline string
		Status   struct {
			Slot   string
			Exists bool
		}
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("status --json: %v\n%s", err, stdout)
	}
	if code != exitError || len(got) != 2 || got[0].Pipeline != "orders" || !got[0].Status.Exists || got[0].Status.Slot != slotOrders ||
		got[1].Pipeline != "billing" || got[1].Status.Exists {
		t.Errorf("status --config --json: exit %d, %+v; want 1, orders' slot and billing's missing", code, got)
	}

	if code, _, stderr := runOutboxd(t, nil, "status", "--config", onlyOrders); code != exitOK {
		t.Errorf("status --config with every slot there: exit %d\n%s", code, stderr)
	}

	// A pipeline whose status cannot be read does not hide the others'.
	gone, err := url.Parse(orders)
	if err != nil {
		t.Fatal(err)
	}
	gone.Path = "/" + testenv.Name(t, "gone")
	withGone := pipelinesFile(t, fmt.Sprintf("brokers: 127.0.0.1:1\npipelines:\n  - name: gone\n    database-url: %s\n    slot: %s\n  - name: orders\n    database-url: %s\n    slot: %s\n",
		gone, testenv.Name(t, "s"), orders, slotOrders))
	code, stdout, stderr = runOutboxd(t, nil, "status", "--config", withGone, "--json")
	var listed []struct{ Pipeline, Error string }
	if err := json.Unmarshal([]byte(stdout), &listed); err != nil {
		t.Fatalf("status --json: %v\n%s", err, stdout)
	}
	if code != exitError || len(listed) != 2 || listed[0].Pipeline != "gone" || listed[0].Error == "" || listed[1].Pipeline != "orders" || listed[1].Error != "" ||
		!strings.Contains(stderr, "outboxd status: pipeline gone: connecting to PostgreSQL") {
		t.Errorf("status --config --json with a database that is gone: exit %d, %+v, stderr:\n%s\nwant 1, gone's error and orders' status", code, listed, stderr)
	}
}

// connect opens a connection for the test, closed at its end.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) }) // t.Context is done by then
	return conn
}

// TestMigrateConfigTakesEachPipelinesShape is issue 49, item 18: a
// pipelines file could not say own-table (nor partitioned), so migrate
// --config, the chart's Job, treated an application's own table as the
// default one and failed (column "topic" does not exist), failing helm
// install. Each pipeline now carries its table's shape and whether migrate
// creates its slot.
func TestMigrateConfigTakesEachPipelinesShape(t *testing.T) {
	t.Parallel()
	own, deflt, noSlot := testenv.Database(t), testenv.Database(t), testenv.Database(t)
	if _, err := connect(t, own).Exec(t.Context(), `CREATE TABLE svc_events (event_id uuid PRIMARY KEY, aggregate text, kind text, body jsonb, created_at timestamptz DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	slots := []string{testenv.Name(t, "own"), testenv.Name(t, "default"), testenv.Name(t, "noslot")}
	path := pipelinesFile(t, fmt.Sprintf(`
brokers: 127.0.0.1:1
pipelines:
  - name: svc
    database-url: %s
    slot: %s
    table: svc_events
    own-table: true
    id-column: event_id
    key-column: aggregate
    topic-template: svc.{kind}
    header-columns: [kind]
    payload-column: body
  - name: orders
    database-url: %s
    slot: %s
    partitioned: true
  - name: later
    database-url: %s
    slot: %s
    create-slot: false
`, own, slots[0], deflt, slots[1], noSlot, slots[2]))
	if code, stdout, stderr := runOutboxd(t, nil, "migrate", "--config", path); code != exitOK {
		t.Fatalf("migrate --config: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, c := range []struct {
		url, slot, table string
		partitioned      bool
		slotWanted       bool
	}{
		{own, slots[0], "svc_events", false, true},
		{deflt, slots[1], "outbox", true, true},
		{noSlot, slots[2], "outbox", false, false},
	} {
		var published, partitioned, hasSlot bool
		if err := connect(t, c.url).QueryRow(t.Context(), `SELECT
				EXISTS (SELECT FROM pg_publication_tables WHERE pubname = 'outboxd' AND tablename = $1),
				EXISTS (SELECT FROM pg_partitioned_table WHERE partrelid = to_regclass($1)),
				EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $2)`, c.table, c.slot).Scan(&published, &partitioned, &hasSlot); err != nil {
			t.Fatal(err)
		}
		if !published || partitioned != c.partitioned || hasSlot != c.slotWanted {
			t.Errorf("%s: published %v, partitioned %v, slot %v; want true, %v, %v", c.table, published, partitioned, hasSlot, c.partitioned, c.slotWanted)
		}
	}
}

// TestValidateSkipsFilesWhenAsked is issue 49, item 22: outboxd validate
// read the files a pipelines file names (database URLs, passwords, TLS
// files), so a file rendered by the chart could not be checked in CI,
// which has none of them. --skip-files checks the rest without reading
// them, and still finds a misspelt key.
func TestValidateSkipsFilesWhenAsked(t *testing.T) {
	t.Parallel()
	good := pipelinesFile(t, `
brokers: kafka:9092
kafka-tls-ca-file: /etc/outboxd/tls/ca.crt
pipelines:
  - name: orders
    database-url-file: /var/run/secrets/outboxd/orders/url
    slot: outboxd_orders
    kafka-sasl-mechanism: SCRAM-SHA-512
    kafka-sasl-username: outboxd
    kafka-sasl-password-file: /var/run/secrets/outboxd/kafka/password
`)
	code, stdout, stderr := runOutboxd(t, nil, "validate", "--config", good)
	if code != exitUsage || !strings.Contains(stderr, "/var/run/secrets/outboxd/orders/url") {
		t.Errorf("validate without --skip-files: exit %d, want 2 naming the missing file:\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runOutboxd(t, nil, "validate", "--skip-files", "--config", good)
	if code != exitOK || !strings.Contains(stdout, "(in /var/run/secrets/outboxd/orders/url, not read)") {
		t.Errorf("validate --skip-files: exit %d, want 0 and the database's file shown unread:\n%s%s", code, stdout, stderr)
	}
	typo := pipelinesFile(t, `
brokers: kafka:9092
pipelines:
  - name: orders
    database-url-file: /var/run/secrets/outboxd/orders/url
    slto: outboxd_orders
`)
	if code, stdout, stderr := runOutboxd(t, nil, "validate", "--skip-files", "--config", typo); code != exitUsage || !strings.Contains(stderr, "slto") {
		t.Errorf("validate --skip-files with a misspelt key: exit %d, want 2 naming it:\n%s%s", code, stdout, stderr)
	}
}
