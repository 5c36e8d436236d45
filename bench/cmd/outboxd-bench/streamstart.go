package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// A drain is timed from the moment the system's stream started, not from
// its first record in Kafka: timing from the first record leaves out
// whatever a system buffers before its first send, and so favours the
// system that buffers most. The stream's start is seen on the server: for
// a system reading a slot, the slot's walsender acquiring it (active_pid
// set, which START_REPLICATION does); for the polling relay, its first
// connection to the database, which its first poll query opens. The time
// from launching the system to that moment is its start-up, reported
// apart.

// streamSighting is what the bench saw of a system's stream starting.
// Every field may be zero (not seen, not known).
type streamSighting struct {
	// Launched is when the bench launched the system.
	Launched time.Time
	// LastUnseen is when the last poll that found no stream was sent: the
	// stream had not started then.
	LastUnseen time.Time
	// Seen is when the first poll that found the stream returned: it had
	// started by then.
	Seen time.Time
	// BackendStart is the server's backend_start of the stream's
	// connection: the stream cannot have started before it.
	BackendStart time.Time
}

// drainTiming is a drain's start-up and drain time, and what the drain
// was timed from.
type drainTiming struct {
	Startup, Drain time.Duration
	// From says where the drain's time starts: "stream start", or
	// "launch" when the stream was not seen.
	From string
}

// timeDrain times a drain that ended (its last record acknowledged) at end.
// The stream's start is taken as the latest moment known to precede it
// (launch, the last poll that found nothing, the connection's
// backend_start), never after the poll that found it: a poll interval
// cannot flatter a system, only cost it at most one interval. When that
// leaves no time before end (the stream was not seen, or only after the
// drain ended), the drain is timed from launch with no start-up; a drain
// that ended before its launch is an error, never a negative time.
func timeDrain(s streamSighting, end time.Time) (drainTiming, error) {
	if s.Launched.IsZero() || end.IsZero() || !s.Launched.Before(end) {
		return drainTiming{}, fmt.Errorf("a drain launched at %s and ended at %s has no duration", stamp(s.Launched), stamp(end))
	}
	fromLaunch := drainTiming{Drain: end.Sub(s.Launched), From: "launch"}
	if s.Seen.IsZero() || s.Seen.Before(s.Launched) {
		return fromLaunch, nil
	}
	from := s.Launched
	for _, t := range []time.Time{s.LastUnseen, s.BackendStart} {
		if t.After(from) && !t.After(s.Seen) {
			from = t
		}
	}
	if !from.Before(end) {
		return fromLaunch, nil
	}
	return drainTiming{Startup: from.Sub(s.Launched), Drain: end.Sub(from), From: "stream start"}, nil
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "(never)"
	}
	return t.Format(time.RFC3339Nano)
}

// streamWatch polls the server, from before a system's launch, until the
// system's stream shows.
type streamWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	stop   func() streamSighting
	mu     sync.Mutex
	s      streamSighting
}

// streamPollEvery is how often the watch polls: the most a drain can be
// charged for the poll, and little enough CPU taken from a start-up.
const streamPollEvery = 5 * time.Millisecond

// watchStream starts polling db for the stream of slot (or, slot "", for
// any other client's connection to db: the relay's). The first poll is
// made before it returns, so that it precedes the launch. stop ends the
// polling and returns the sighting, Launched left for the caller.
func (e *env) watchStream(ctx context.Context, db, slot string) (*streamWatch, error) {
	conn, err := pgx.Connect(ctx, e.DatabaseURL(db))
	if err != nil {
		return nil, fmt.Errorf("connecting to watch the stream start: %w", err)
	}
	query, arg := `SELECT (SELECT a.backend_start FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = $1)`, slot
	if slot == "" {
		query, arg = `SELECT min(backend_start) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, db
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &streamWatch{cancel: cancel, done: make(chan struct{})}
	// poll reports whether the stream showed.
	poll := func() bool {
		sent := time.Now()
		var start *time.Time
		if err := conn.QueryRow(ctx, query, arg).Scan(&start); err != nil {
			return errors.Is(err, context.Canceled)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if start == nil {
			w.s.LastUnseen = sent
			return false
		}
		w.s.Seen, w.s.BackendStart = time.Now(), *start
		return true
	}
	seen := poll()
	go func() {
		defer close(w.done)
		defer conn.Close(context.WithoutCancel(ctx))
		t := time.NewTicker(streamPollEvery)
		defer t.Stop()
		for !seen {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			seen = poll()
		}
	}()
	w.stop = sync.OnceValue(func() streamSighting {
		cancel()
		<-w.done
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.s
	})
	return w, nil
}
