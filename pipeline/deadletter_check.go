package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/publish"
)

// topicAdmin is what the dead-letter topic check needs of a producer.
type topicAdmin interface {
	CheckTopic(ctx context.Context, topic string) error
	CreateTopic(ctx context.Context, topic string) (created bool, err error)
}

// checkDeadLetterTopic checks at start that the dead-letter topic exists,
// without creating it. A missing one stops the run, unless the operator
// allowed topic creation (Kafka.AllowAutoTopicCreation): then it is created
// now, with the broker's defaults, as Kafka Connect creates its dead-letter
// queue, rather than at the first dead letter, when a broker without
// auto.create.topics.enable would refuse it and stop the run. Kafka out of
// reach is no reason to stop: its records wait like any other.
func checkDeadLetterTopic(ctx context.Context, kafka topicAdmin, topic string, allowCreate bool, n field.Names, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := kafka.CheckTopic(ctx, topic)
	switch {
	case errors.Is(err, publish.ErrTopicMissing) && allowCreate:
		created, err := kafka.CreateTopic(ctx, topic)
		if err != nil {
			return fmt.Errorf("%s: the topic does not exist, and %s is on: %w", n.Of("Pump.DeadLetterTopic"), n.Of("Kafka.AllowAutoTopicCreation"), err)
		}
		if created {
			log.Info("created the dead-letter topic with the broker's default partitions and replication factor ("+n.Of("Kafka.AllowAutoTopicCreation")+")", "dead_letter_topic", topic)
		}
	case errors.Is(err, publish.ErrTopicMissing):
		return fmt.Errorf("%s: %w: create it first, or set %s to have outboxd create it with the broker's defaults", n.Of("Pump.DeadLetterTopic"), err, n.Of("Kafka.AllowAutoTopicCreation"))
	case err != nil:
		log.Warn("could not check the dead-letter topic; going on", "dead_letter_topic", topic, "err", err)
	}
	return nil
}
