package idempotent

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers a dead letter adds to the record's own.
const (
	HeaderError     = "idempotent.error"
	HeaderTopic     = "idempotent.topic"
	HeaderPartition = "idempotent.partition"
	HeaderOffset    = "idempotent.offset"
	HeaderConsumer  = "idempotent.consumer"
	// HeaderValueBytes, on a dead letter sent without the record's value
	// and headers (the whole was too large for the dead-letter topic), is
	// the size of the value left out.
	HeaderValueBytes = "idempotent.value_bytes"
)

// maxErrorHeader bounds the error header of a dead letter sent as a
// reference: a panic's stack may be what made the whole too large.
const maxErrorHeader = 4 << 10

// deadLetter produces r to the dead-letter topic with headers saying why,
// then records its key (when it has one) so that a replay does not
// dead-letter it again. Both steps retry transient failures (Kafka or the
// database unreachable) until ctx ends, never giving the record up for
// them. A crash, or ctx ending, between the two dead-letters it twice.
func (c *Consumer) deadLetter(ctx, wctx context.Context, r *kgo.Record, cause error) error {
	dl := &kgo.Record{Topic: c.cfg.DeadLetterTopic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
		Headers: append(append([]kgo.RecordHeader(nil), r.Headers...),
			kgo.RecordHeader{Key: HeaderError, Value: []byte(cause.Error())},
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
			kgo.RecordHeader{Key: HeaderConsumer, Value: []byte(c.cfg.Name)})}
	recs := []*kgo.Record{r}
	bo := c.newBackOff()
	// The produce always runs under ctx: franz-go retries an unreachable
	// broker by itself for as long as the context lasts, and Run must be
	// able to stop meanwhile. So once ctx ended nothing is dead-lettered:
	// the record is left for the next Run.
	err := c.retryTransient(ctx, wctx, "dead-lettering", recs, bo, func(context.Context) error {
		err := c.cl.ProduceSync(ctx, dl).FirstErr()
		if errors.Is(err, kerr.MessageTooLarge) && !isReference(dl) {
			// Too large with its headers: a reference, rather than a stop
			// at this record on every start.
			dl = reference(dl, len(r.Value))
			err = c.cl.ProduceSync(ctx, dl).FirstErr()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("dead-lettering %s[%d] offset %d to %s (after: %v): %w", r.Topic, r.Partition, r.Offset, c.cfg.DeadLetterTopic, cause, err)
	}
	c.metrics.deadLettered.Inc()
	c.cfg.Log.Warn("dead-lettered a record", "consumer", c.cfg.Name, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
		"dead_letter_topic", c.cfg.DeadLetterTopic, "err", cause)
	var ke *keyError
	if errors.As(cause, &ke) {
		return nil
	}
	key, _ := c.cfg.Key(r)
	err = c.retryTransient(ctx, wctx, "recording the dead-lettered key", recs, bo, func(octx context.Context) error {
		return c.record(octx, key)
	})
	if err != nil {
		return fmt.Errorf("recording the dead-lettered key %q: %w", key, err)
	}
	return nil
}

// reference is dl without the record's value and own headers: its key,
// the dead-letter headers (the error cut to maxErrorHeader bytes) and
// the size of the value left out.
func reference(dl *kgo.Record, valueBytes int) *kgo.Record {
	ref := &kgo.Record{Topic: dl.Topic, Key: dl.Key, Timestamp: dl.Timestamp}
	for _, h := range dl.Headers {
		switch h.Key {
		case HeaderError:
			if len(h.Value) > maxErrorHeader {
				h.Value = append(h.Value[:maxErrorHeader:maxErrorHeader], "..."...)
			}
		case HeaderTopic, HeaderPartition, HeaderOffset, HeaderConsumer, "id", SourceHeader:
		default:
			continue
		}
		ref.Headers = append(ref.Headers, h)
	}
	ref.Headers = append(ref.Headers, kgo.RecordHeader{Key: HeaderValueBytes, Value: []byte(strconv.Itoa(valueBytes))})
	return ref
}

func isReference(dl *kgo.Record) bool {
	for _, h := range dl.Headers {
		if h.Key == HeaderValueBytes {
			return true
		}
	}
	return false
}

// record records key as processed in a transaction of its own.
func (c *Consumer) record(ctx context.Context, key string) error {
	tx, err := c.begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning the transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
	if _, err := c.store.claim(ctx, tx, c.cfg.Name, []string{key}, nil); err != nil {
		return lostOn(tx, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return lostOn(tx, fmt.Errorf("committing: %w", err))
	}
	return nil
}
