// Package config is outboxd's command-line configuration: one Config struct,
// its defaults in one place (Default), flags that each also read an
// OUTBOXD_<FLAG_IN_UPPER_SNAKE> environment variable, and Validate, which
// reports every problem at once.
package config

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/internal/sqlquote"
	"github.com/outboxd/outboxd/publish"
)

// Config holds every option of every command; each command registers the
// flags it uses.
type Config struct {
	DatabaseURL string
	Brokers     string // comma-separated HOST:PORT

	Table       string
	Publication string
	Slot        string
	CreateSlot  bool

	MaxInFlightRecords     int
	MaxInFlightBytes       int
	Linger                 time.Duration
	AllowAutoTopicCreation bool

	StatusInterval       time.Duration
	ShutdownTimeout      time.Duration
	SlotRetryInterval    time.Duration
	ReconnectMaxInterval time.Duration

	LogLevel  string
	LogFormat string

	MetricsAddr          string
	Pprof                bool
	WALCheckInterval     time.Duration
	WALRetainedWarnBytes int64
	HeartbeatInterval    time.Duration

	KafkaTLS                   bool
	KafkaTLSCAFile             string
	KafkaTLSCertFile           string
	KafkaTLSKeyFile            string
	KafkaTLSInsecureSkipVerify bool
	KafkaSASLMechanism         string
	KafkaSASLUsername          string
	KafkaSASLPassword          string
}

// Default returns the defaults of every option.
func Default() Config {
	return Config{
		Table:                "public.outbox",
		Publication:          cdc.DefaultPublication,
		Slot:                 cdc.DefaultSlot,
		CreateSlot:           true,
		MaxInFlightRecords:   publish.DefaultMaxInFlightRecords,
		MaxInFlightBytes:     publish.DefaultMaxInFlightBytes,
		StatusInterval:       cdc.DefaultStatusInterval,
		ShutdownTimeout:      cdc.DefaultShutdownTimeout,
		SlotRetryInterval:    cdc.DefaultSlotRetryInterval,
		ReconnectMaxInterval: cdc.DefaultReconnectMaxInterval,
		LogLevel:             "info",
		LogFormat:            "text",
		WALCheckInterval:     30 * time.Second,
		WALRetainedWarnBytes: 1 << 30,
	}
}

// Flag names, shared by registration and validation messages.
const (
	FlagDatabaseURL            = "database-url"
	FlagBrokers                = "brokers"
	FlagTable                  = "table"
	FlagPublication            = "publication"
	FlagSlot                   = "slot"
	FlagCreateSlot             = "create-slot"
	FlagMaxInFlightRecords     = "max-in-flight-records"
	FlagMaxInFlightBytes       = "max-in-flight-bytes"
	FlagLinger                 = "linger"
	FlagAllowAutoTopicCreation = "allow-auto-topic-creation"
	FlagStatusInterval         = "status-interval"
	FlagShutdownTimeout        = "shutdown-timeout"
	FlagSlotRetryInterval      = "slot-retry-interval"
	FlagReconnectMaxInterval   = "reconnect-max-interval"
	FlagLogLevel               = "log-level"
	FlagLogFormat              = "log-format"
	FlagMetricsAddr            = "metrics-addr"
	FlagPprof                  = "pprof"
	FlagWALCheckInterval       = "wal-check-interval"
	FlagWALRetainedWarnBytes   = "wal-retained-warn-bytes"
	FlagHeartbeatInterval      = "heartbeat-interval"
	FlagKafkaTLS               = "kafka-tls"
	FlagKafkaTLSCAFile         = "kafka-tls-ca-file"
	FlagKafkaTLSCertFile       = "kafka-tls-cert-file"
	FlagKafkaTLSKeyFile        = "kafka-tls-key-file"
	FlagKafkaTLSInsecure       = "kafka-tls-insecure-skip-verify"
	FlagKafkaSASLMechanism     = "kafka-sasl-mechanism"
	FlagKafkaSASLUsername      = "kafka-sasl-username"
	FlagKafkaSASLPassword      = "kafka-sasl-password"
)

// Register defines the named flags on fs, bound to c's fields, with c's
// current values as defaults.
func (c *Config) Register(fs *flag.FlagSet, names ...string) {
	for _, n := range names {
		switch n {
		case FlagDatabaseURL:
			fs.StringVar(&c.DatabaseURL, n, c.DatabaseURL, "PostgreSQL URL, e.g. postgres://user:pass@host:5432/app (required); the replication connection adds replication=database")
		case FlagBrokers:
			fs.StringVar(&c.Brokers, n, c.Brokers, "Kafka bootstrap brokers, HOST:PORT[,HOST:PORT...] (required)")
		case FlagTable:
			fs.StringVar(&c.Table, n, c.Table, `outbox table in SQL syntax, optionally schema-qualified: app.outbox, or "App"."Outbox" for capitals or other characters`)
		case FlagPublication:
			fs.StringVar(&c.Publication, n, c.Publication, "publication over the outbox table")
		case FlagSlot:
			fs.StringVar(&c.Slot, n, c.Slot, "logical replication slot (pgoutput); an unused slot retains WAL until outboxd confirms it")
		case FlagCreateSlot:
			fs.BoolVar(&c.CreateSlot, n, c.CreateSlot, "create the slot when missing (rows committed before it existed are not published)")
		case FlagMaxInFlightRecords:
			fs.IntVar(&c.MaxInFlightRecords, n, c.MaxInFlightRecords, "records sent to Kafka and not yet acknowledged, at most; bounds memory and the duplicates after a crash")
		case FlagMaxInFlightBytes:
			fs.IntVar(&c.MaxInFlightBytes, n, c.MaxInFlightBytes, "bytes of those records, at most")
		case FlagLinger:
			fs.DurationVar(&c.Linger, n, c.Linger, "how long a Kafka batch waits for more records (0: send at once; raise for throughput at the cost of latency)")
		case FlagAllowAutoTopicCreation:
			fs.BoolVar(&c.AllowAutoTopicCreation, n, c.AllowAutoTopicCreation, "let the broker create unknown topics (needs auto.create.topics.enable); otherwise a record for an unknown topic stops the run")
		case FlagStatusInterval:
			fs.DurationVar(&c.StatusInterval, n, c.StatusInterval, "longest time between standby status updates; keep well below the server's wal_sender_timeout")
		case FlagShutdownTimeout:
			fs.DurationVar(&c.ShutdownTimeout, n, c.ShutdownTimeout, "on SIGTERM/SIGINT, how long to finish the open transaction, wait for Kafka and confirm")
		case FlagSlotRetryInterval:
			fs.DurationVar(&c.SlotRetryInterval, n, c.SlotRetryInterval, "how often a standby retries a slot another process is using")
		case FlagReconnectMaxInterval:
			fs.DurationVar(&c.ReconnectMaxInterval, n, c.ReconnectMaxInterval, "longest wait between reconnects after a lost connection (exponential backoff)")
		case FlagLogLevel:
			fs.StringVar(&c.LogLevel, n, c.LogLevel, "log level: debug, info, warn, error")
		case FlagLogFormat:
			fs.StringVar(&c.LogFormat, n, c.LogFormat, "log format: text or json")
		case FlagMetricsAddr:
			fs.StringVar(&c.MetricsAddr, n, c.MetricsAddr, "serve Prometheus /metrics, /healthz and /readyz on this address, e.g. :9187 (empty: off)")
		case FlagPprof:
			fs.BoolVar(&c.Pprof, n, c.Pprof, "also serve Go's profiler at /debug/pprof/ on --metrics-addr (for diagnosing; keep the address private)")
		case FlagWALCheckInterval:
			fs.DurationVar(&c.WALCheckInterval, n, c.WALCheckInterval, "how often to check the WAL the slot retains (and whether PostgreSQL invalidated it)")
		case FlagWALRetainedWarnBytes:
			fs.Int64Var(&c.WALRetainedWarnBytes, n, c.WALRetainedWarnBytes, "log a warning when the slot retains more WAL than this many bytes")
		case FlagHeartbeatInterval:
			fs.DurationVar(&c.HeartbeatInterval, n, c.HeartbeatInterval, "write a pg_logical_emit_message heartbeat this often (0: off; only needed where keepalives do not advance an idle slot)")
		case FlagKafkaTLS:
			fs.BoolVar(&c.KafkaTLS, n, c.KafkaTLS, "connect to Kafka with TLS (system CAs unless --kafka-tls-ca-file)")
		case FlagKafkaTLSCAFile:
			fs.StringVar(&c.KafkaTLSCAFile, n, c.KafkaTLSCAFile, "PEM file of the CA(s) that signed the brokers' certificates (implies --kafka-tls)")
		case FlagKafkaTLSCertFile:
			fs.StringVar(&c.KafkaTLSCertFile, n, c.KafkaTLSCertFile, "PEM client certificate for mutual TLS (with --kafka-tls-key-file)")
		case FlagKafkaTLSKeyFile:
			fs.StringVar(&c.KafkaTLSKeyFile, n, c.KafkaTLSKeyFile, "PEM client key for mutual TLS")
		case FlagKafkaTLSInsecure:
			fs.BoolVar(&c.KafkaTLSInsecureSkipVerify, n, c.KafkaTLSInsecureSkipVerify, "do not verify the brokers' certificates (testing only)")
		case FlagKafkaSASLMechanism:
			fs.StringVar(&c.KafkaSASLMechanism, n, c.KafkaSASLMechanism, "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: none); use with TLS, PLAIN sends the password as is")
		case FlagKafkaSASLUsername:
			fs.StringVar(&c.KafkaSASLUsername, n, c.KafkaSASLUsername, "SASL user name")
		case FlagKafkaSASLPassword:
			fs.StringVar(&c.KafkaSASLPassword, n, c.KafkaSASLPassword, "SASL password (prefer the environment variable: flags show in ps)")
		default:
			panic("config: unknown flag " + n)
		}
	}
}

// EnvName is the environment variable of a flag: OUTBOXD_ and the flag in
// upper snake case.
func EnvName(flagName string) string {
	return "OUTBOXD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs; a flag not given on the command line takes its
// environment variable when set.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		if v := getenv(EnvName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", EnvName(f.Name), err))
			}
		}
	})
	return errors.Join(errs...)
}

// Validate reports every problem with the flags the command registered.
func (c *Config) Validate(fs *flag.FlagSet) error {
	var errs []error
	has := func(n string) bool { return fs.Lookup(n) != nil }
	bad := func(n, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s (%s): %s", n, EnvName(n), fmt.Sprintf(format, args...)))
	}
	if has(FlagDatabaseURL) {
		// Parsed by what connects, so what is checked is what is used.
		if c.DatabaseURL == "" {
			bad(FlagDatabaseURL, "required")
		} else if _, err := pgconn.ParseConfig(c.DatabaseURL); err != nil {
			bad(FlagDatabaseURL, "%s", errDatabaseURLSyntax)
		}
	}
	if has(FlagBrokers) {
		if len(c.BrokerList()) == 0 {
			bad(FlagBrokers, "required")
		}
		for _, b := range c.BrokerList() {
			if i := strings.LastIndex(b, ":"); i <= 0 || i == len(b)-1 {
				bad(FlagBrokers, "%q is not HOST:PORT", b)
			}
		}
	}
	for _, n := range []struct {
		flag, val string
	}{{FlagTable, c.Table}, {FlagPublication, c.Publication}, {FlagSlot, c.Slot}} {
		if has(n.flag) && n.val == "" {
			bad(n.flag, "must not be empty")
		}
	}
	if has(FlagTable) && c.Table != "" {
		if _, err := sqlquote.ParseQualified(c.Table); err != nil {
			bad(FlagTable, "%v", err)
		}
	}
	if has(FlagSlot) && c.Slot != "" {
		for _, r := range c.Slot {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
				bad(FlagSlot, "%q: slot names use lower-case letters, digits and underscores only", c.Slot)
				break
			}
		}
	}
	if has(FlagMaxInFlightRecords) && c.MaxInFlightRecords <= 0 {
		bad(FlagMaxInFlightRecords, "must be positive")
	}
	if has(FlagMaxInFlightBytes) && c.MaxInFlightBytes <= 0 {
		bad(FlagMaxInFlightBytes, "must be positive")
	}
	for _, d := range []struct {
		flag string
		val  time.Duration
	}{{FlagStatusInterval, c.StatusInterval}, {FlagShutdownTimeout, c.ShutdownTimeout}, {FlagSlotRetryInterval, c.SlotRetryInterval}, {FlagReconnectMaxInterval, c.ReconnectMaxInterval}} {
		if has(d.flag) && d.val <= 0 {
			bad(d.flag, "must be positive")
		}
	}
	if has(FlagLinger) && c.Linger < 0 {
		bad(FlagLinger, "must not be negative")
	}
	if has(FlagLogLevel) {
		var l slog.Level
		if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
			bad(FlagLogLevel, "%q is not debug, info, warn or error", c.LogLevel)
		}
	}
	if has(FlagLogFormat) && c.LogFormat != "text" && c.LogFormat != "json" {
		bad(FlagLogFormat, "%q is not text or json", c.LogFormat)
	}
	if has(FlagMetricsAddr) && c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			bad(FlagMetricsAddr, "%q is not HOST:PORT or :PORT", c.MetricsAddr)
		}
	}
	if has(FlagWALCheckInterval) && c.WALCheckInterval <= 0 {
		bad(FlagWALCheckInterval, "must be positive")
	}
	if has(FlagWALRetainedWarnBytes) && c.WALRetainedWarnBytes <= 0 {
		bad(FlagWALRetainedWarnBytes, "must be positive")
	}
	if has(FlagHeartbeatInterval) && c.HeartbeatInterval < 0 {
		bad(FlagHeartbeatInterval, "must not be negative")
	}
	for _, f := range []struct{ flag, path string }{{FlagKafkaTLSCAFile, c.KafkaTLSCAFile}, {FlagKafkaTLSCertFile, c.KafkaTLSCertFile}, {FlagKafkaTLSKeyFile, c.KafkaTLSKeyFile}} {
		if has(f.flag) && f.path != "" {
			if _, err := os.Stat(f.path); err != nil {
				bad(f.flag, "%v", err)
			}
		}
	}
	if has(FlagKafkaTLSCertFile) && (c.KafkaTLSCertFile == "") != (c.KafkaTLSKeyFile == "") {
		bad(FlagKafkaTLSCertFile, "a client certificate needs --%s and a key needs --%s", FlagKafkaTLSKeyFile, FlagKafkaTLSCertFile)
	}
	if has(FlagKafkaSASLMechanism) {
		switch strings.ToUpper(c.KafkaSASLMechanism) {
		case "":
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
			if c.KafkaSASLUsername == "" || c.KafkaSASLPassword == "" {
				bad(FlagKafkaSASLMechanism, "needs --%s and --%s", FlagKafkaSASLUsername, FlagKafkaSASLPassword)
			}
		default:
			bad(FlagKafkaSASLMechanism, "%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.KafkaSASLMechanism)
		}
	}
	return errors.Join(errs...)
}

// BrokerList splits Brokers.
func (c *Config) BrokerList() []string {
	var out []string
	for _, b := range strings.Split(c.Brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Logger builds the logger the options ask for, writing to w.
func (c *Config) Logger(w *os.File) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel)) // validated
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
