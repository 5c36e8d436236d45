package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/outbox"
)

// ensureProgressTopic creates the progress topic (one partition, compacted,
// the broker's replication factor) or checks that the existing one is
// compacted: the sink keeps one live record per slot there, and a topic
// that deletes by age would forget it.
func ensureProgressTopic(ctx context.Context, adm *kadm.Client, topic string, n field.Names) (created bool, err error) {
	compact := "compact"
	_, err = adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, topic)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, kerr.TopicAlreadyExists):
	default:
		return false, fmt.Errorf("creating the progress topic %s (1 partition, cleanup.policy=compact): %w; create it yourself, or allow outboxd to create topics", topic, err)
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("reading the configuration of the progress topic %s: %w", topic, err)
	}
	rc, err := cfgs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return false, fmt.Errorf("reading the configuration of the progress topic %s: %w", topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil && (!strings.Contains(*c.Value, "compact") || strings.Contains(*c.Value, "delete")) {
			return false, fmt.Errorf("%w: %s has cleanup.policy=%s, so Kafka would delete outboxd's progress by age (alter the topic, or choose another with %s)", errNotCompacted, topic, *c.Value, n.Of("ProgressTopic"))
		}
	}
	return false, nil
}

// errNotCompacted is ensureProgressTopic's answer for a topic that is not
// compacted.
var errNotCompacted = errors.New("the progress topic must have cleanup.policy=compact (and not delete)")

// readProgress reads the progress topic to its end with read_committed
// isolation and returns the last position recorded under key by txnID (the
// zero Position when there is none). Call it after the producer fenced
// every earlier one: no transaction of this key is open then, and no later
// one can commit.
//
// What it trusts: a record under key counts only when it was written in a
// committed Kafka transaction (its batch is transactional: an idempotent
// or plain producer, such as an at-least-once outboxd, cannot write one,
// and read_committed drops aborted ones) and carries the progress header
// naming txnID. A transactional record without the header counts only
// before the first one with it (written by an outboxd from before the
// header). Anything else is ignored, and counted in a warning. A producer
// with its own transactional id and Write on the topic could still forge
// a record: restrict Write on the progress topic to outboxd's principal
// (docs/guarantees.md); outboxd itself never publishes an event there.
//
// It reads up to the high watermark seen first, waiting while other keys'
// open transactions hold the last stable offset below it: a progress record
// committed after another slot's transaction began is still read.
func readProgress(ctx context.Context, opts []kgo.Opt, adm *kadm.Client, topic string, key []byte, txnID string, n field.Names, log *slog.Logger) (outbox.Position, error) {
	hwm, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = hwm.Error()
	}
	if err != nil {
		return outbox.Position{}, fmt.Errorf("listing the end offsets of the progress topic %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return outbox.Position{}, fmt.Errorf("listing the start offsets of the progress topic %s: %w", topic, err)
	}
	want := map[int32]int64{} // partition: the offset to read up to
	from := map[int32]kgo.Offset{}
	hwm.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > s.Offset {
			want[o.Partition] = o.Offset
			from[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return outbox.Position{}, nil
	}
	if err := awaitStable(ctx, adm, topic, want); err != nil {
		return outbox.Position{}, err
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// The commit marker is the last offset of a committed transaction:
		// kept, it shows where the topic ends.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(250*time.Millisecond),
	)...)
	if err != nil {
		return outbox.Position{}, fmt.Errorf("reading the progress topic %s: %w", topic, err)
	}
	defer cl.Close()
	var (
		pos     outbox.Position
		own     bool // a record with the progress header was read
		ignored int
		last    *kgo.Record // the last record ignored
	)
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return outbox.Position{}, fmt.Errorf("reading the progress topic %s: %w", topic, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return outbox.Position{}, fmt.Errorf("reading the progress topic %s: %w", topic, errs[0].Err)
		}
		var derr error
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if r.Attrs.IsControl() || !bytes.Equal(r.Key, key) || derr != nil {
				return
			}
			writer, hasHeader := headerValue(r, progressHeader)
			switch {
			case !r.Attrs.IsTransactional() || (hasHeader && writer != txnID) || (!hasHeader && own):
				ignored, last = ignored+1, r
				return
			case hasHeader:
				own = true
			}
			pos, derr = decodeProgress(r.Value)
		})
		if derr != nil {
			return outbox.Position{}, fmt.Errorf("progress topic %s: %w", topic, derr)
		}
	}
	if ignored > 0 {
		log.Warn("ignored records on the progress topic under this slot's key that this transactional id did not write in a committed transaction "+
			"(a changed "+n.Of("TransactionalID")+" starts progress anew; anything else is not outboxd's: restrict Write on the topic to outboxd)",
			"topic", topic, "key", string(key), "ignored", ignored, "last_offset", last.Offset, "last_partition", last.Partition, "resume_after", pos)
	}
	return pos, nil
}

// awaitStable waits until the last stable offset of every partition in
// want reached it.
func awaitStable(ctx context.Context, adm *kadm.Client, topic string, want map[int32]int64) error {
	for {
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return fmt.Errorf("listing the last stable offsets of the progress topic %s: %w", topic, err)
		}
		var behind []string
		for p, end := range want {
			if o, ok := lso.Lookup(topic, p); !ok || o.Offset < end {
				behind = append(behind, fmt.Sprintf("partition %d's last stable offset %d is below %d", p, o.Offset, end))
			}
		}
		if len(behind) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for open transactions on the progress topic %s to end (%s): %w", topic, strings.Join(behind, ", "), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
