package config

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/lib/rawio"
	"github.com/outboxd/outboxd/pump"
)

// TestDescribeDatabase pins the bug where a URL that url.Parse refused
// (a # or a bad % escape in the password) fell back to a password= regex
// and was printed verbatim, and where sslpassword was never masked.
func TestDescribeDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://app:s3cret@db:5432/app?sslmode=require", "host=db:5432 database=app user=app"},
		{"postgres://app@db/app", "host=db:5432 database=app user=app"},
		{"postgres://db/app?user=app&password=s3cret&sslpassword=s3cret", "host=db:5432 database=app user=app"},
		{"host=db user=app password=s3cret dbname=app", "host=db:5432 database=app user=app"},
		{"host=db,db2 port=5433 password='s3 cret' dbname=app user=u", "host=db:5433,db2:5433 database=app user=u"},
		{"postgres://app:pa#ss@db:5432/app?sslmode=disable", "host=db:5432 database=app user=app"}, // pgconn reads pa#ss as the password
		{"postgres://app:s3cr%zz@db/app", "(connection string not shown: it does not parse)"},
		{"host=db password='unterminated", "(connection string not shown: it does not parse)"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := DescribeDatabase(tt.in); got != tt.want {
			t.Errorf("DescribeDatabase(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestDatabaseURLWithUnencodedAt pins bug 15 of issue 37: pgconn ends a
// URL's user-info at the first '@', so postgres://app:topsecret@SECONDHALF@host
// passed validation with host "SECONDHALF@host", which the start-up dump,
// every retry warning and status showed. Such a URL is refused, and neither
// the refusal nor DescribeDatabase nor the dump shows any part of it; the
// same strings percent-encoded, and '@' where it is unambiguous, still pass.
func TestDatabaseURLWithUnencodedAt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url string
		ok        bool   // valid; then described as describe
		describe  string // when ok
	}{
		{name: "@ in the password", url: "postgres://app:topsecret@SECONDHALF@db.example:5432/app?sslmode=disable"},
		{name: "@ in the password, postgresql scheme, no user", url: "postgresql://:topsecret@SECONDHALF@db/app"},
		{name: "@ in the password, several hosts", url: "postgres://app:topsecret@SECONDHALF@db1,db2:5433/app"},
		{name: "@ in the password, no path", url: "postgres://app:topsecret@SECONDHALF@db?sslmode=disable"},
		{name: "@ in the user", url: "postgres://app@SECONDHALF@db/app"},
		{name: "@ in the user and the password", url: "postgres://app@SECONDHALF:topsecret@db/app"},
		{name: "many @", url: "postgres://app:top@secret@SECOND@HALF@db/app"},
		{name: "@ in a query password before any path", url: "postgres://db?password=topsecret@SECONDHALF"},
		{name: "@ in a query host", url: "postgres://app:topsecret@/app?host=SECONDHALF@db"},
		{name: "@ in a keyword/value host", url: "host=SECONDHALF@db user=app password=topsecret dbname=app"},
		// Regression (issue 37, review): a password holding '/' parsed
		// without error as host, port and database, showing its tail.
		{name: "/ in the password", url: "postgres://app:/SECONDHALF@db.example/app"},
		{name: "/ in the password after digits", url: "postgres://app:12/SECONDHALF@db.example/app"},
		{name: "percent-encoded @", url: "postgres://app:topsecret%40SECONDHALF@db/app", ok: true, describe: "host=db:5432 database=app user=app"},
		{name: "percent-encoded @ in the user", url: "postgres://app%40corp:topsecret@db/app", ok: true, describe: "host=db:5432 database=app user=app@corp"},
		{name: "@ in the database name", url: "postgres://app:topsecret@db/app@x", ok: true, describe: "host=db:5432 database=app@x user=app"},
		{name: "@ in a keyword/value password", url: "host=db user=app password=topsecret@SECONDHALF dbname=app", ok: true, describe: "host=db:5432 database=app user=app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, fs := parsed(t, []string{"--database-url", tt.url}, nil, GroupDatabase)
			err := c.Validate(fs)
			var dump bytes.Buffer
			slog.New(slog.NewTextHandler(&dump, nil)).Info("starting", "config", Dump(fs))
			described := DescribeDatabase(tt.url)
			if tt.ok {
				if err != nil {
					t.Errorf("Validate = %v, want nil", err)
				}
				if described != tt.describe {
					t.Errorf("DescribeDatabase = %q, want %q", described, tt.describe)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want the URL refused (DescribeDatabase says %q)", described)
			}
			if msg := err.Error(); !strings.Contains(msg, "--database-url") || !strings.Contains(msg, "@ as %40") {
				t.Errorf("Validate = %v, want it to name --database-url and say to percent-encode @ as %%40", err)
			}
			for what, out := range map[string]string{"Validate": err.Error(), "DescribeDatabase": described, "the start-up dump": dump.String()} {
				for _, secret := range []string{"topsecret", "top@", "secret", "SECOND", "HALF"} {
					if strings.Contains(out, secret) {
						t.Errorf("%s shows %q of the URL: %s", what, secret, out)
					}
				}
			}
		})
	}
}

// parsed is the defaults with groups' flags registered and args parsed,
// env standing in for the environment; a parse error fails the test.
func parsed(t *testing.T, args []string, env map[string]string, groups ...Group) (*Config, *flag.FlagSet) {
	t.Helper()
	c := Default()
	fs := flag.NewFlagSet("outboxd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs, groups...)
	if err := Parse(fs, args, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	return &c, fs
}

func TestConfigDumpRedactsSecrets(t *testing.T) {
	t.Parallel()
	_, fs := parsed(t, []string{"--database-url", "postgres://app:pg-secret@db/app", "--kafka-sasl-mechanism", "PLAIN",
		"--kafka-sasl-username", "u", "--kafka-sasl-password", "kafka-secret"}, nil, GroupDatabase, GroupSlot, GroupKafka)
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting", "config", Dump(fs))
	out := buf.String()
	for _, s := range []string{"pg-secret", "kafka-secret"} {
		if strings.Contains(out, s) {
			t.Errorf("config dump shows %s: %s", s, out)
		}
	}
	for _, s := range []string{`"slot":"outboxd"`, `"kafka_sasl_password":"xxxxx"`, `"database_url":"host=db:5432 database=app user=app"`, `"max_record_bytes":"1048588"`} {
		if !strings.Contains(out, s) {
			t.Errorf("config dump lacks %s: %s", s, out)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string // substrings of the error; empty: valid
	}{
		{"valid", []string{"--database-url", "postgres://h/db", "--brokers", "a:1,b:2"}, nil},
		{"all wrong at once", []string{"--brokers", "nocolon", "--slot", "Bad-Slot", "--status-interval", "0s", "--metrics-addr", "nope", "--kafka-sasl-mechanism", "GSSAPI", "--log-level", "loud"},
			[]string{"--database-url", "nocolon", "Bad-Slot", "--status-interval", "--metrics-addr", "GSSAPI", "loud"}},
		{"sasl needs credentials", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--kafka-sasl-mechanism", "scram-sha-512"}, []string{"--kafka-sasl-username"}},
		{"client cert needs key", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--kafka-tls-cert-file", "/nonexistent.pem"}, []string{"no such file", "--kafka-tls-key-file"}},
		{"key=value connection string", []string{"--database-url", "host=db dbname=app", "--brokers", "a:1"}, nil},
		{"negative max-procs", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--max-procs", "-1"}, []string{"--max-procs (OUTBOXD_MAX_PROCS): must not be negative"}},
		{"exactly-once", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--delivery", "exactly-once", "--transactional-id", "orders"}, nil},
		{"exactly-once without dead letters", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--delivery", "exactly-once", "--dead-letter-topic", "dlq"},
			[]string{"--dead-letter-topic (OUTBOXD_DEAD_LETTER_TOPIC): not with exactly-once delivery"}},
		{"delivery modes", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--delivery", "exactly_once", "--transaction-timeout", "50ms", "--progress-topic", ""},
			[]string{`--delivery (OUTBOXD_DELIVERY): "exactly_once" is not at-least-once or exactly-once`,
				"--transaction-timeout (OUTBOXD_TRANSACTION_TIMEOUT): must be longer than the transaction interval", "--progress-topic (OUTBOXD_PROGRESS_TOPIC): must not be empty"}},
		{"backfill with a created slot", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--create-slot", "--backfill-where", "published_at IS NULL"}, nil},
		{"backfill without creating the slot", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--backfill-where", "id > 5"},
			[]string{"--backfill-where (OUTBOXD_BACKFILL_WHERE): a backfill goes with creating the slot (create-slot)"}},
		{"blank backfill predicate", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--create-slot", "--backfill-where", "  "},
			[]string{"--backfill-where (OUTBOXD_BACKFILL_WHERE): must not be blank"}},
		{"backfill with exactly-once", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--create-slot", "--backfill-where", "true", "--delivery", "exactly-once"},
			[]string{"--backfill-where (OUTBOXD_BACKFILL_WHERE): not supported with exactly-once delivery"}},
		// Regression (issue 38): once the components owned these rules, a
		// zero value meant "the default" to them, and an explicit empty or
		// zero flag ran with the default instead of being refused.
		{"explicit empty or zero", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--slot", "", "--failover-slot", "",
			"--server-timeout", "0s", "--max-record-bytes", "0", "--compression", "", "--transaction-timeout", "0s"},
			[]string{"--slot (OUTBOXD_SLOT): must not be empty", "--failover-slot (OUTBOXD_FAILOVER_SLOT): must not be empty",
				"--server-timeout (OUTBOXD_SERVER_TIMEOUT): must be positive", "--max-record-bytes (OUTBOXD_MAX_RECORD_BYTES): must be positive",
				"--compression (OUTBOXD_COMPRESSION): must not be empty", "--transaction-timeout (OUTBOXD_TRANSACTION_TIMEOUT): must be positive"}},
		{"read linger", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--read-linger", "20ms"}, nil},
		{"read linger out of range", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--read-linger", "101ms"},
			[]string{"--read-linger (OUTBOXD_READ_LINGER): must be between 0 and 100ms"}},
		{"negative read linger", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--read-linger", "-1ms"},
			[]string{"--read-linger (OUTBOXD_READ_LINGER): must be between 0 and 100ms"}},
		{"compression", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--compression", "zstd"}, nil},
		{"unknown compression", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--compression", "brotli"},
			[]string{`--compression (OUTBOXD_COMPRESSION): "brotli" is not one of none, gzip, snappy, lz4, zstd`}},
		{"column mapping", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--id-column", "seq", "--topic-template", "orders.{aggregatetype}",
			"--header-columns", "type, tenant", "--timestamp-column", "occurred_at"}, nil},
		{"every column mapping problem", []string{"--database-url", "postgres://h/db", "--brokers", "a:1", "--id-column", "", "--topic-template", "orders.{type",
			"--header-columns", "type,id,type"},
			[]string{"--id-column (OUTBOXD_ID_COLUMN): must not be empty", `--topic-template (OUTBOXD_TOPIC_TEMPLATE): topic template "orders.{type": '{' without '}'`,
				`--header-columns (OUTBOXD_HEADER_COLUMNS): header columns: "id" is reserved for the outbox id header; header columns: "type" listed twice`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Every flag, so a flag without a valid default fails "valid".
			c, fs := parsed(t, tt.args, nil, GroupDatabase, GroupTable, GroupShape, GroupPublication, GroupSlot, GroupCreateSlot, GroupBackfill, GroupColumns, GroupStream, GroupPump, GroupKafka, GroupDelivery, GroupOps, GroupLog)
			err := c.Validate(fs)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate = nil, want errors")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestReadLingerDefaultAndOff: the command lingers by default, and 0 (as
// a flag or in the environment) turns it off rather than falling back to
// the default.
func TestReadLingerDefaultAndOff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
	}{
		{"default", nil, nil, cdc.DefaultReadLinger},
		{"off by flag", []string{"--read-linger", "0"}, nil, 0},
		{"off by environment", nil, map[string]string{"OUTBOXD_READ_LINGER": "0s"}, 0},
		{"set", []string{"--read-linger", "20ms"}, nil, 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, fs := parsed(t, append([]string{"--database-url", "postgres://h/db", "--brokers", "a:1"}, tt.args...), tt.env, GroupDatabase, GroupStream, GroupKafka)
			if err := c.Validate(fs); err != nil {
				t.Fatalf("Validate = %v", err)
			}
			if c.Stream.ReadLinger != tt.want {
				t.Errorf("read linger %s, want %s", c.Stream.ReadLinger, tt.want)
			}
		})
	}
}

// TestReadLingerNeedsRawIO: with raw I/O off (rawio.EnvVar) the read
// linger, a raised socket low-water mark, is unavailable: it defaults to
// off, and a linger asked for is refused by name rather than silently not
// done. A switch value that says neither on nor off is refused too.
// Not parallel: rawio reads the process environment.
func TestReadLingerNeedsRawIO(t *testing.T) {
	tests := []struct {
		name    string
		rawIO   string
		args    []string
		want    time.Duration
		wantErr []string // in Validate's error; nil: none
	}{
		{name: "off: the default linger goes with it", rawIO: "off", want: 0},
		{name: "off: 0 is fine", rawIO: "off", args: []string{"--read-linger", "0"}, want: 0},
		{name: "off: a linger asked for", rawIO: "off", args: []string{"--read-linger", "20ms"}, want: 20 * time.Millisecond,
			wantErr: []string{"--read-linger (OUTBOXD_READ_LINGER)", "needs raw I/O", "OUTBOXD_RAW_IO=off"}},
		{name: "off: out of range says so first", rawIO: "off", args: []string{"--read-linger", "1h"}, want: time.Hour,
			wantErr: []string{"--read-linger (OUTBOXD_READ_LINGER): must be between 0 and"}},
		{name: "on", rawIO: "on", args: []string{"--read-linger", "20ms"}, want: 20 * time.Millisecond},
		{name: "on by default", rawIO: "", want: cdc.DefaultReadLinger},
		{name: "neither on nor off", rawIO: "maybe", want: cdc.DefaultReadLinger, wantErr: []string{`OUTBOXD_RAW_IO="maybe"`, "want on or off"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(rawio.EnvVar, tt.rawIO)
			c, fs := parsed(t, append([]string{"--database-url", "postgres://h/db", "--brokers", "a:1"}, tt.args...), nil, GroupDatabase, GroupStream, GroupKafka)
			if c.Stream.ReadLinger != tt.want {
				t.Errorf("read linger %s, want %s", c.Stream.ReadLinger, tt.want)
			}
			err := c.Validate(fs)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate found nothing wrong")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestEnvironmentFillsUnsetFlags(t *testing.T) {
	t.Parallel()
	c := Default()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	c.Register(fs, GroupSlot, GroupPublication, GroupPump)
	env := map[string]string{"OUTBOXD_SLOT": "from_env", "OUTBOXD_PUBLICATION": "from_env", "OUTBOXD_MAX_IN_FLIGHT_RECORDS": "oops"}
	err := Parse(fs, []string{"--publication", "from_flag"}, func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "OUTBOXD_MAX_IN_FLIGHT_RECORDS") {
		t.Errorf("Parse error = %v, want one naming OUTBOXD_MAX_IN_FLIGHT_RECORDS", err)
	}
	if c.Stream.Slot != "from_env" || c.Stream.Publication != "from_flag" {
		t.Errorf("slot %q publication %q: env must fill unset flags only", c.Stream.Slot, c.Stream.Publication)
	}
}

// TestValidatePrune: prune's options, among them --older-than in days.
func TestValidatePrune(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		older time.Duration
		want  []string
	}{
		{"days", []string{"--older-than", "7d"}, 7 * 24 * time.Hour, nil},
		{"a Go duration", []string{"--older-than", "36h"}, 36 * time.Hour, nil},
		{"missing", nil, 0, []string{"--older-than (OUTBOXD_OLDER_THAN): required"}},
		{"every problem", []string{"--older-than", "0s", "--created-column", "", "--ahead-days", "0", "--batch-size", "0", "--recovery-margin", "-1m", "--lock-timeout", "0s"}, 0,
			[]string{"--older-than", "--created-column", "--ahead-days", "--batch-size", "--recovery-margin (OUTBOXD_RECOVERY_MARGIN): must not be negative", "--lock-timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, fs := parsed(t, append([]string{"--database-url", "postgres://h/db"}, tt.args...), nil, GroupDatabase, GroupTable, GroupSlot, GroupPrune, GroupLog)
			err := c.Validate(fs)
			if len(tt.want) == 0 {
				if err != nil || c.Prune.OlderThan != tt.older {
					t.Fatalf("Validate = %v, --older-than %s; want nil, %s", err, c.Prune.OlderThan, tt.older)
				}
				return
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want it to name %s", err, w)
				}
			}
		})
	}
	for _, bad := range []string{"7days", "d", "-1d", "1.5d"} {
		var d days
		if err := d.Set(bad); err == nil {
			t.Errorf("--older-than %q accepted as %s", bad, time.Duration(d))
		}
	}
}

// Every problem a component's Validate can find with a field is reported
// under the flag that sets it: a field without a flag would reach users as
// a Go field name they cannot set.
func TestEveryComponentProblemNamesAFlag(t *testing.T) {
	c := Default()
	c.Stream.DatabaseURL, c.Stream.Slot, c.Stream.FailoverSlot, c.Stream.BackfillWhere = "", "A", "x", " "
	c.Stream.ReadLinger, c.Stream.ServerTimeout, c.Stream.IdleWait = -1, -1, -1
	c.Stream.StatusInterval, c.Stream.ShutdownTimeout, c.Stream.SlotRetryInterval, c.Stream.ReconnectMaxInterval = -1, -1, -1, -1
	c.Pump = pumpConfigAllWrong()
	c.Kafka.Brokers, c.Kafka.Compression, c.Kafka.MaxRecordBytes, c.Kafka.Linger = nil, "x", 1, -1
	c.Txn.ProgressTopic, c.Txn.Interval, c.Txn.MaxRecords, c.Txn.Timeout = "a b", -1, -1, -1
	c.Monitor.Interval, c.Monitor.WarnBytes = -1, -1
	byField := fieldFlags()
	problems := c.componentProblems()
	if len(problems) < 20 {
		t.Fatalf("only %d problems found: %v", len(problems), problems)
	}
	for _, p := range problems {
		if byField[p.field] == "" && p.field != "Txn.MaxBytes" { // no flag sets it: library use only
			t.Errorf("%s (%s): no flag sets this field", p.field, p.problem)
		}
	}
}

func pumpConfigAllWrong() pump.Config {
	return pump.Config{MaxInFlightRecords: -1, MaxInFlightBytes: -1, DeadLetterTopic: "__x"}
}
