package publish

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/lib/field"
)

// kgoLogger routes franz-go's own log lines into the injected logger:
// franz-go's warnings and errors at Warn, its info at Debug (it is
// chatty). franz-go's errors (a failed SASL handshake, a TLS handshake the
// broker refused) end one attempt, not outboxd: the client tries again
// with backoff, so they are retries; giving up is outboxd's own Error.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel {
	switch {
	case l.log.Enabled(context.Background(), slog.LevelDebug):
		return kgo.LogLevelInfo
	default:
		return kgo.LogLevelWarn
	}
}

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch {
	case level == kgo.LogLevelError && strings.Contains(msg, "fatal"):
		lv = slog.LevelError // the client gives up on its records ("fatal InitProducerID error, failing all buffered records")
	case level == kgo.LogLevelError || level == kgo.LogLevelWarn:
		lv = slog.LevelWarn
	}
	l.log.Log(context.Background(), lv, "kafka: "+msg, keyvals...)
}

// readErrors logs, at Warn, a response from a broker that could not be
// read: franz-go ends such a connection and retries on a new one, but
// says so only at its debug level. A broker that stopped answering (a
// half-open connection, a partition) shows here as an i/o timeout once
// the request's timeout passed.
type readErrors struct {
	names field.Names
	log   *slog.Logger
}

func (h readErrors) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) {
		return
	}
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	if what, ok := wrongProtocol(err, h.names); ok {
		h.log.Warn("kafka: the peer at the broker address "+what+"; retrying on a new connection",
			"broker", meta.NodeID, "addr", addr, "request", kmsg.Key(key).Name(), "err", err)
		return
	}
	h.log.Warn("kafka: reading a response from the broker failed; retrying on a new connection",
		"broker", meta.NodeID, "addr", addr, "request", kmsg.Key(key).Name(), "err", err)
}
