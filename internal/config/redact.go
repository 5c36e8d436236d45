package config

import (
	"log/slog"
	"net/url"
	"regexp"
)

const redacted = "xxxxx"

var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// RedactURL hides the password of a PostgreSQL URL or key=value connection
// string, for logs and status output.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", redacted)
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return kvPassword.ReplaceAllString(s, "${1}"+redacted)
}

// LogValue implements slog.LogValuer: the configuration for the startup
// dump, with every secret redacted.
func (c Config) LogValue() slog.Value {
	secret := func(s string) string {
		if s == "" {
			return ""
		}
		return redacted
	}
	return slog.GroupValue(
		slog.String("database_url", RedactURL(c.DatabaseURL)),
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
