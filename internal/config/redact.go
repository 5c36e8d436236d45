package config

import (
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

const redacted = "xxxxx"

// errDatabaseURLSyntax explains a connection string that does not parse
// without quoting it: any part of it may be a password, and a string that
// does not parse has no reliable boundaries to redact by.
const errDatabaseURLSyntax = "does not parse as a PostgreSQL URL or keyword/value connection string (not shown: it may hold a password); " +
	"in a URL, percent-encode special characters of the password: # as %23, % as %25, @ as %40, / as %2F, space as %20"

// DescribeDatabase tells which database a connection string points at
// without showing any secret: host(s), port, database and user, read with
// the same parser that connects (pgconn.ParseConfig). A string that does
// not parse is described by a constant. Nothing else of the string (its
// password, sslpassword, or anything the parser did not understand) is
// ever shown.
func DescribeDatabase(conn string) string {
	if conn == "" {
		return ""
	}
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		return "(connection string not shown: it does not parse)"
	}
	hosts := []string{cfg.Host + ":" + strconv.Itoa(int(cfg.Port))}
	for _, fb := range cfg.Fallbacks {
		if h := fb.Host + ":" + strconv.Itoa(int(fb.Port)); h != hosts[len(hosts)-1] {
			hosts = append(hosts, h)
		}
	}
	return "host=" + strings.Join(hosts, ",") + " database=" + cfg.Database + " user=" + cfg.User
}

// LogValue implements slog.LogValuer: the configuration for the startup
// dump, with every secret left out or redacted.
func (c Config) LogValue() slog.Value {
	secret := func(s string) string {
		if s == "" {
			return ""
		}
		return redacted
	}
	return slog.GroupValue(
		slog.String("database", DescribeDatabase(c.DatabaseURL)),
		slog.String("brokers", c.Brokers),
		slog.String("slot", c.Slot),
		slog.String("publication", c.Publication),
		slog.Bool("create_slot", c.CreateSlot),
		slog.Int("max_in_flight_records", c.MaxInFlightRecords),
		slog.Int("max_in_flight_bytes", c.MaxInFlightBytes),
		slog.Duration("linger", c.Linger),
		slog.Bool("allow_auto_topic_creation", c.AllowAutoTopicCreation),
		slog.Duration("status_interval", c.StatusInterval),
		slog.Duration("shutdown_timeout", c.ShutdownTimeout),
		slog.Duration("slot_retry_interval", c.SlotRetryInterval),
		slog.Duration("reconnect_max_interval", c.ReconnectMaxInterval),
		slog.String("metrics_addr", c.MetricsAddr),
		slog.Bool("pprof", c.Pprof),
		slog.Duration("wal_check_interval", c.WALCheckInterval),
		slog.Int64("wal_retained_warn_bytes", c.WALRetainedWarnBytes),
		slog.Duration("heartbeat_interval", c.HeartbeatInterval),
		slog.Bool("kafka_tls", c.KafkaTLS || c.KafkaTLSCAFile != "" || c.KafkaTLSCertFile != ""),
		slog.Bool("kafka_tls_insecure_skip_verify", c.KafkaTLSInsecureSkipVerify),
		slog.String("kafka_sasl_mechanism", c.KafkaSASLMechanism),
		slog.String("kafka_sasl_username", c.KafkaSASLUsername),
		slog.String("kafka_sasl_password", secret(c.KafkaSASLPassword)),
		slog.String("log_level", c.LogLevel),
		slog.String("log_format", c.LogFormat),
	)
}
