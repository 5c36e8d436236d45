package servers

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// WarmKafka produces records like the benchmarks' through the broker
// before anything is timed, then transactional more through Kafka
// transactions. A fresh JVM compiles its hot paths during the first minute
// of load: without this, whichever system ran first was measured against a
// slower broker (every system's first drain was its slowest). And the
// first transactional producer on a cluster creates the transaction state
// topic and loads its coordinator: without the transactions, outboxd-eos's
// first drain paid for both and ran far slower than the drains after it.
func (s *Servers) WarmKafka(ctx context.Context, records, transactional int) error {
	const topic = "bench.warmup"
	if err := s.CreateTopics(ctx, topic); err != nil {
		return fmt.Errorf("creating the warm-up topic: %w", err)
	}
	defer func() {
		adm := s.Admin()
		defer adm.Close()
		_, _ = adm.DeleteTopics(context.WithoutCancel(ctx), topic)
	}()
	value := make([]byte, 230)
	for i := range value {
		value[i] = 'x'
	}
	if err := s.warmProducer(ctx, topic, value, records); err != nil {
		return fmt.Errorf("warming the broker up: %w", err)
	}
	if err := s.warmTransactions(ctx, topic, value, transactional); err != nil {
		return fmt.Errorf("warming transactions up: %w", err)
	}
	return nil
}

func (s *Servers) warmProducer(ctx context.Context, topic string, value []byte, records int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka.Addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	for i := range records {
		key := []byte(strconv.Itoa(i % 1000))
		cl.Produce(ctx, &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(strconv.Itoa(i))}}}, nil)
	}
	return cl.Flush(ctx)
}

func (s *Servers) warmTransactions(ctx context.Context, topic string, value []byte, records int) error {
	if records == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka.Addr), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("bench.warmup"))
	if err != nil {
		return err
	}
	defer cl.Close()
	const perTxn = 2000
	for i := 0; i < records; i += perTxn {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		for j := i; j < min(i+perTxn, records); j++ {
			cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(j % 1000)), Value: value}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return err
		}
	}
	return nil
}
