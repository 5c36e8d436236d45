package publish_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/publish"
)

// topicAdmin is what both producers offer for the dead-letter topic.
type topicAdmin interface {
	CheckTopic(ctx context.Context, topic string) error
	CreateTopic(ctx context.Context, topic string) (bool, error)
}

// topicExists asks brokers whether topic exists with a metadata request
// that never creates it.
func topicExists(t *testing.T, brokers []string, topic string) bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("reading metadata of %s: %v", topic, err)
	}
	for _, rt := range resp.Topics {
		if rt.Topic != nil && *rt.Topic == topic {
			err := kerr.ErrorForCode(rt.ErrorCode)
			if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
				t.Fatalf("metadata of %s: %v", topic, err)
			}
			return err == nil
		}
	}
	return false
}

// Issue 37 item 17: with --allow-auto-topic-creation the dead-letter topic
// check asked the broker to create the topic (kadm's metadata requests carry
// the client's AllowAutoTopicCreation), then called it missing. CheckTopic
// must look without creating, say ErrTopicMissing for a missing topic and
// nil for an existing one; CreateTopic creates it, and says so.
func TestCheckTopicNeverCreates(t *testing.T) {
	t.Parallel()
	brokers := []struct {
		name  string
		start func(t *testing.T) []string
	}{
		{"kfake allowing auto-creation", func(t *testing.T) []string {
			t.Helper()
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return c.ListenAddrs()
		}},
		{"test Kafka (auto.create.topics.enable=true)", func(t *testing.T) []string {
			t.Helper()
			return testenv.Brokers(t)
		}},
	}
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			addrs := b.start(t)
			existing := testenv.CreateTopic(t, addrs, testenv.Name(t, "dlq"), 1)
			missing := testenv.Name(t, "dlq")
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, _ = testenv.Admin(t, addrs).DeleteTopics(ctx, missing)
			})
			sinks := []struct {
				name string
				new  func(t *testing.T, cfg publish.Config) topicAdmin
			}{
				{"at-least-once", func(t *testing.T, cfg publish.Config) topicAdmin {
					t.Helper()
					p, err := publish.New(cfg, quiet())
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(p.Close)
					return p
				}},
				{"exactly-once", func(t *testing.T, cfg publish.Config) topicAdmin {
					t.Helper()
					p, err := publish.NewTxn(publish.TxnConfig{}, cfg, "s",
						func(context.Context) (publish.Server, error) { return publish.Server{SystemID: "1", Timeline: 1}, nil }, quiet())
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(p.Close)
					return p
				}},
			}
			for _, s := range sinks {
				p := s.new(t, publish.Config{Brokers: addrs, AllowAutoTopicCreation: true})
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				if err := p.CheckTopic(ctx, existing); err != nil {
					t.Errorf("%s: CheckTopic(existing) = %v, want nil", s.name, err)
				}
				if err := p.CheckTopic(ctx, missing); !errors.Is(err, publish.ErrTopicMissing) {
					t.Errorf("%s: CheckTopic(missing) = %v, want ErrTopicMissing", s.name, err)
				}
				cancel()
				// A broker creates an auto-created topic in the background:
				// watch for a while.
				for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
					if topicExists(t, addrs, missing) {
						t.Fatalf("%s: CheckTopic created the missing topic %s", s.name, missing)
					}
				}
			}
			p := sinks[0].new(t, publish.Config{Brokers: addrs, AllowAutoTopicCreation: true})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if created, err := p.CreateTopic(ctx, missing); !created || err != nil {
				t.Fatalf("CreateTopic(missing) = %v, %v; want true, nil", created, err)
			}
			if !topicExists(t, addrs, missing) {
				t.Fatalf("CreateTopic said it created %s, and it does not exist", missing)
			}
			if created, err := p.CreateTopic(ctx, existing); created || err != nil {
				t.Errorf("CreateTopic(existing) = %v, %v; want false, nil", created, err)
			}
			testenv.Eventually(t, 30*time.Second, "the created topic is seen by CheckTopic", func() bool {
				return p.CheckTopic(ctx, missing) == nil
			})
		})
	}
}
