package cdc

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/decode"
	"github.com/outboxd/outboxd/harness/pgoutputtest"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/contain"
	"github.com/outboxd/outboxd/outbox"
)

// panickyConsumer is a stage with a bug: it panics on any change.
type panickyConsumer struct{}

func (panickyConsumer) Apply(context.Context, outbox.Change) error     { panic("a bug in a stage") }
func (panickyConsumer) Reject(context.Context, *outbox.RowError) error { panic("a bug in a stage") }

// TestAPanicInAStageEndsTheSession is issue 49, item 3: a panic in what
// the reader calls for a message (decoding, the layout, the registry
// stage, the pump) ended the process, every pipeline in it. The reader
// returns it as a permanent error carrying the stack and where the stream
// was, so that its session ends as after any failure (drain, final status
// of what Kafka acknowledged) and its pipeline stops alone.
func TestAPanicInAStageEndsTheSession(t *testing.T) {
	r := &reader{dec: decode.NewDecoder(""), lay: layout.New(layout.DefaultColumns()), out: panickyConsumer{}, slot: "orders",
		serverWALEnd: &atomic.Uint64{}, lastEnd: 0x200}
	r.wake.renew(t.Context(), time.Now().Add(time.Minute))
	defer r.wake.stop()
	msg := append(pgoutputtest.Msg{'w'}.LSN(0x300).LSN(0x300).TS(time.Now()), pgoutputtest.Begin(0x400, time.Now(), 7)...)
	err := r.handle(t.Context(), msg)
	var pe *contain.PanicError
	switch {
	case !errors.As(err, &pe):
		t.Fatalf("handle = %v, want a *contain.PanicError", err)
	case !IsPermanent(err):
		t.Errorf("handle = %v, want it permanent: the pipeline stops, and its supervisor starts it again", err)
	case !strings.Contains(err.Error(), "0/200") || !strings.Contains(err.Error(), "orders") || !strings.Contains(err.Error(), "a bug in a stage"):
		t.Errorf("handle = %q, want it to name the slot, the last transaction's end and the panic", err)
	case !strings.Contains(string(pe.Stack), "panickyConsumer"):
		t.Errorf("the stack does not show where it panicked:\n%s", pe.Stack)
	}
}
