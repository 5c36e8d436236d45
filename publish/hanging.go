package publish

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// hangWatch sees hanging transactions on the progress topic: a partition
// whose last stable offset (LSO) has stood still below its high watermark
// for longer than the transaction timeout. Kafka aborts a transaction open
// longer than its producer's timeout, so one open past it is left behind
// (a broker bug, a coordinator moved at the wrong moment, or a producer
// with a far longer timeout), and until someone aborts it every
// read_committed reader of the partition waits: outboxd's own progress
// reader too, at its next start or after a commit whose outcome Kafka did
// not confirm. The watch does not abort anything (only an operator can
// know whose transaction it is); it says which, where, and how.
type hangWatch struct {
	topic   string
	timeout time.Duration // the transaction timeout: a stall longer is a hang
	broker  string        // for the commands it suggests
	log     *slog.Logger

	mu    sync.Mutex
	parts map[int32]*lsoStall
}

// lsoStall is a partition whose LSO is below its high watermark.
type lsoStall struct {
	lso, hwm int64
	since    time.Time // when the LSO was first seen at lso
	reported bool      // reported as hanging
}

func newHangWatch(topic string, timeout time.Duration, broker string, log *slog.Logger) *hangWatch {
	return &hangWatch{topic: topic, timeout: timeout, broker: broker, log: log, parts: map[int32]*lsoStall{}}
}

// every is how often Run looks: often enough to report a hang soon after
// the transaction timeout, rarely enough to cost nothing.
func (w *hangWatch) every() time.Duration {
	return min(max(w.timeout/4, 100*time.Millisecond), 30*time.Second)
}

// observe records partition p's offsets seen at now. It returns the stall
// when it has just become a hang (to be reported), and whether a reported
// hang just ended.
func (w *hangWatch) observe(p int32, lso, hwm int64, now time.Time) (hung *lsoStall, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.parts[p]
	if ok && (lso >= hwm || st.lso != lso) {
		// At the end, or moving: no transaction has held it.
		delete(w.parts, p)
		ended, ok = st.reported, false
	}
	if lso >= hwm {
		return nil, ended
	}
	if !ok {
		w.parts[p] = &lsoStall{lso: lso, hwm: hwm, since: now}
		return nil, ended
	}
	st.hwm = hwm
	if !st.reported && now.Sub(st.since) > w.timeout {
		st.reported = true
		cp := *st
		return &cp, ended
	}
	return nil, ended
}

// Since is when the LSO of the longest hanging partition stopped moving;
// zero while none is hanging.
func (w *hangWatch) Since() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var since time.Time
	for _, st := range w.parts {
		if st.reported && (since.IsZero() || st.since.Before(since)) {
			since = st.since
		}
	}
	return since
}

// Run looks at the progress topic's offsets until ctx ends. A look that
// fails (Kafka unreachable, the topic not created yet) is skipped: other
// parts of outboxd report those.
func (w *hangWatch) Run(ctx context.Context, adm *kadm.Client) error {
	tick := time.NewTicker(w.every())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := w.look(ctx, adm); err != nil && ctx.Err() == nil {
			w.log.Debug("looking for hanging transactions on the progress topic", "topic", w.topic, "err", err)
		}
	}
}

func (w *hangWatch) look(ctx context.Context, adm *kadm.Client) error {
	ctx, cancel := context.WithTimeout(ctx, w.every()+10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, w.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return err
	}
	stable, err := adm.ListCommittedOffsets(ctx, w.topic)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return err
	}
	now := time.Now()
	ends.Each(func(end kadm.ListedOffset) {
		lso, ok := stable.Lookup(w.topic, end.Partition)
		if !ok {
			return
		}
		hung, ended := w.observe(end.Partition, lso.Offset, end.Offset, now)
		switch {
		case hung != nil:
			w.report(ctx, adm, end.Partition, hung, now)
		case ended:
			w.log.Info("the hanging Kafka transaction on the progress topic ended (aborted, or committed): its last stable offset moves again",
				"topic", w.topic, "partition", end.Partition, "last_stable_offset", lso.Offset, "high_watermark", end.Offset)
		}
	})
	return nil
}

// report warns of a hang, naming the producer that holds it when the
// broker says (DescribeProducers, Kafka 3.0+).
func (w *hangWatch) report(ctx context.Context, adm *kadm.Client, p int32, st *lsoStall, now time.Time) {
	args := []any{"topic", w.topic, "partition", p, "last_stable_offset", st.lso, "high_watermark", st.hwm,
		"stuck_for", now.Sub(st.since).Round(time.Second), "transaction_timeout", w.timeout}
	if ds, err := adm.DescribeProducers(ctx, kadm.TopicsSet{w.topic: {p: struct{}{}}}); err == nil {
		ds.EachProducer(func(d kadm.DescribedProducer) {
			if d.CurrentTxnStartOffset == st.lso {
				args = append(args, "producer_id", d.ProducerID, "producer_epoch", d.ProducerEpoch)
			}
		})
	}
	server := "--bootstrap-server " + w.broker
	args = append(args,
		"list_with", fmt.Sprintf("kafka-transactions.sh %s find-hanging --topic %s --partition %d", server, w.topic, p),
		"abort_with", fmt.Sprintf("kafka-transactions.sh %s abort --topic %s --partition %d --start-offset %d", server, w.topic, p, st.lso))
	w.log.Warn("a hanging Kafka transaction on the progress topic: its last stable offset has stood still below the high watermark for longer than the transaction timeout, "+
		"so every read_committed reader of the partition waits behind it, outboxd's progress reader at its next start among them; "+
		"abort it with the command given (with --command-config for TLS or SASL) once you know it is not a live producer's", args...)
}
