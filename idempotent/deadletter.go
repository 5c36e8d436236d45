package idempotent

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers a dead letter adds to the record's own.
const (
	HeaderError     = "idempotent.error"
	HeaderTopic     = "idempotent.topic"
	HeaderPartition = "idempotent.partition"
	HeaderOffset    = "idempotent.offset"
	HeaderConsumer  = "idempotent.consumer"
)

// deadLetter produces r to the dead-letter topic with headers saying why,
// then records its key (when it has one) so that a replay does not
// dead-letter it again. A crash between the two dead-letters it twice.
func (c *Consumer) deadLetter(ctx context.Context, r *kgo.Record, cause error) error {
	dl := &kgo.Record{Topic: c.cfg.DeadLetterTopic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
		Headers: append(append([]kgo.RecordHeader(nil), r.Headers...),
			kgo.RecordHeader{Key: HeaderError, Value: []byte(cause.Error())},
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
			kgo.RecordHeader{Key: HeaderConsumer, Value: []byte(c.cfg.Name)})}
	if err := c.cl.ProduceSync(ctx, dl).FirstErr(); err != nil {
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
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("recording the dead-lettered key %q: %w", key, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
	if _, err := c.store.claim(ctx, tx, c.cfg.Name, []string{key}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
