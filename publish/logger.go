package publish

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger routes franz-go's own log lines into the injected logger:
// franz-go's warnings (a broker that went away, retries) at Warn, its info
// at Debug (it is chatty), errors at Error.
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
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	}
	l.log.Log(context.Background(), lv, "kafka: "+msg, keyvals...)
}
