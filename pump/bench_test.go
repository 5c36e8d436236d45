package pump

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// benchSink holds the done callbacks until the benchmark acknowledges them.
type benchSink struct{ dones []func(error) }

func (s *benchSink) Publish(_ *outbox.Event, done func(error))   { s.dones = append(s.dones, done) }
func (s *benchSink) EndTxn(context.Context, outbox.Commit) error { return nil }
func (s *benchSink) Abort(context.Context) error                 { return nil }

// BenchmarkApplyAck is the pump's share of a record's way, per event: 10-row
// transactions taken into the window, handed over at their commit, and
// acknowledged in reverse order (as from several partitions).
func BenchmarkApplyAck(b *testing.B) {
	s := &benchSink{}
	p, err := New(Config{}, s, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	p.Start(0x10)
	ctx := context.Background()
	now := time.Now()
	ev := outbox.Event{Topic: "t", Key: []byte("k"), Value: []byte(`{"n":1}`),
		Headers: []outbox.Header{{Key: "id", Value: []byte("1")}}, Table: "public.outbox", CommitTime: now}
	lsn := outbox.LSN(0x100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 10 {
		if err := p.Apply(ctx, outbox.Change{Kind: outbox.ChangeBegin, Begin: outbox.Begin{CommitLSN: lsn, CommitTime: now}}); err != nil {
			b.Fatal(err)
		}
		for range 10 {
			ev.CommitLSN = lsn
			if err := p.Apply(ctx, outbox.Change{Kind: outbox.ChangeEvent, Event: ev}); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Apply(ctx, outbox.Change{Kind: outbox.ChangeCommit, Commit: outbox.Commit{CommitLSN: lsn, EndLSN: lsn + 8, CommitTime: now}}); err != nil {
			b.Fatal(err)
		}
		for j := len(s.dones) - 1; j >= 0; j-- {
			s.dones[j](nil)
		}
		s.dones = s.dones[:0]
		lsn += 0x100
	}
}
