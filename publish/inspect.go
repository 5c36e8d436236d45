package publish

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ClusterFacts are what Inspect reads of a Kafka cluster, with the
// client a pipeline would use (its TLS and SASL): what outboxd doctor
// judges before a run.
type ClusterFacts struct {
	Brokers int
	// Topics are the topics asked about, by name.
	Topics map[string]TopicFacts
	// TxnStateRF and TxnStateMinISR are a broker's
	// transaction.state.log.replication.factor and .min.isr, and
	// TxnMaxTimeout its transaction.max.timeout.ms: what exactly-once
	// delivery depends on; 0 when the broker did not say (an ACL, or an
	// old broker).
	TxnStateRF, TxnStateMinISR int
	TxnMaxTimeout              time.Duration
}

// TopicFacts is one topic as the cluster describes it.
type TopicFacts struct {
	Exists     bool
	Partitions int
	// RF is the replication factor (the fewest replicas of any
	// partition); MinISR its min.insync.replicas (0 when not read).
	RF, MinISR int
}

// Inspect reads cfg's cluster: its brokers, topics (without creating any,
// whatever auto.create.topics.enable says) and the settings exactly-once
// delivery depends on. An error means the cluster could not be reached
// or read with cfg's settings.
func Inspect(ctx context.Context, cfg Config, topics []string, log *slog.Logger) (ClusterFacts, error) {
	facts := ClusterFacts{Topics: map[string]TopicFacts{}}
	if err := cfg.Validate(); err != nil {
		return facts, err
	}
	cfg, err := cfg.WithDefaults().secured(log)
	if err != nil {
		return facts, err
	}
	cfg.AllowAutoTopicCreation = false                                        // looking must not create
	cl, err := kgo.NewClient(clientOpts(cfg, log, func(string, int32) {})...) // it produces nothing
	if err != nil {
		return facts, fmt.Errorf("creating a Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return facts, fmt.Errorf("reaching Kafka: %w", err)
	}
	facts.Brokers = len(brokers)
	for _, t := range topics {
		if err := checkTopic(ctx, cl, t); err != nil {
			facts.Topics[t] = TopicFacts{}
			continue
		}
		facts.Topics[t] = TopicFacts{Exists: true}
	}
	var present []string
	for t, f := range facts.Topics {
		if f.Exists {
			present = append(present, t)
		}
	}
	if len(present) > 0 {
		details, err := adm.ListTopics(ctx, present...)
		if err != nil {
			return facts, fmt.Errorf("describing topics: %w", err)
		}
		for name, d := range details {
			f := facts.Topics[name]
			f.Partitions = len(d.Partitions)
			f.RF = 0
			for _, p := range d.Partitions {
				if f.RF == 0 || len(p.Replicas) < f.RF {
					f.RF = len(p.Replicas)
				}
			}
			facts.Topics[name] = f
		}
		// Not read (an ACL): MinISR stays 0, unknown.
		configs, _ := adm.DescribeTopicConfigs(ctx, present...)
		for _, rc := range configs {
			for _, c := range rc.Configs {
				if rc.Err == nil && c.Key == "min.insync.replicas" && c.Value != nil {
					f := facts.Topics[rc.Name]
					f.MinISR, _ = strconv.Atoi(*c.Value)
					facts.Topics[rc.Name] = f
				}
			}
		}
	}
	if len(brokers) == 0 {
		return facts, nil
	}
	// Not read (an ACL, an old broker): the settings stay 0, unknown.
	configs, _ := adm.DescribeBrokerConfigs(ctx, brokers[0].NodeID)
	for _, rc := range configs {
		for _, c := range rc.Configs {
			if rc.Err != nil || c.Value == nil {
				continue
			}
			n, _ := strconv.Atoi(*c.Value)
			switch c.Key {
			case "transaction.state.log.replication.factor":
				facts.TxnStateRF = n
			case "transaction.state.log.min.isr":
				facts.TxnStateMinISR = n
			case "transaction.max.timeout.ms":
				facts.TxnMaxTimeout = time.Duration(n) * time.Millisecond
			}
		}
	}
	return facts, nil
}
