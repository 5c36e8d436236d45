package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	// Denied: the broker refused to describe the topic to this client
	// (TOPIC_AUTHORIZATION_FAILED); whether it exists is not known.
	Denied bool
	// ACLKnown: the broker said what this client may do on the topic
	// (Kafka 2.3+; every operation where it has no authorizer);
	// CanWrite and CanDescribe are then the client's WRITE and DESCRIBE.
	ACLKnown, CanWrite, CanDescribe bool
}

// describeTopics reads topics with one metadata request of its own
// (AllowAutoTopicCreation false, as checkTopic), asking what this client
// may do on each, into facts; it returns those that exist.
func describeTopics(ctx context.Context, cl *kgo.Client, topics []string, facts map[string]TopicFacts) ([]string, error) {
	if len(topics) == 0 {
		return nil, nil // no topics in a request means every topic
	}
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	req.IncludeTopicAuthorizedOperations = true
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
		facts[t] = TopicFacts{}
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("reading Kafka's metadata for topics %s: %w", strings.Join(topics, ", "), err)
	}
	var present []string
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		var f TopicFacts
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case errors.Is(err, kerr.TopicAuthorizationFailed):
			f.Denied = true
		case errors.Is(err, kerr.UnknownTopicOrPartition):
		case err != nil:
			return nil, fmt.Errorf("reading Kafka's metadata for topic %s: %w", *t.Topic, err)
		default:
			f.Exists = true
			f.Partitions = len(t.Partitions)
			for _, p := range t.Partitions {
				if f.RF == 0 || len(p.Replicas) < f.RF {
					f.RF = len(p.Replicas)
				}
			}
			present = append(present, *t.Topic)
		}
		if t.AuthorizedOperations != math.MinInt32 { // MinInt32: not said
			f.ACLKnown = true
			for _, op := range kadm.DecodeACLOperations(t.AuthorizedOperations) {
				switch op {
				case kmsg.ACLOperationAll:
					f.CanWrite, f.CanDescribe = true, true
				case kmsg.ACLOperationWrite:
					f.CanWrite = true
				case kmsg.ACLOperationDescribe:
					f.CanDescribe = true
				}
			}
		}
		facts[*t.Topic] = f
	}
	return present, nil
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
	present, err := describeTopics(ctx, cl, topics, facts.Topics)
	if err != nil {
		return facts, err
	}
	if len(present) > 0 {
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
