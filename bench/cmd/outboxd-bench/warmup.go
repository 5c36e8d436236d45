package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// warmKafka produces records like the benchmark's through the broker before
// anything is timed. A fresh JVM compiles its hot paths during the first
// minute of load: without this, whichever system ran first was measured
// against a slower broker (every system's first drain was its slowest).
func (e *env) warmKafka(ctx context.Context, records int) error {
	const topic = "bench.warmup"
	if err := e.CreateTopics(ctx, topic); err != nil {
		return fmt.Errorf("creating the warm-up topic: %w", err)
	}
	defer func() {
		adm := e.Admin()
		defer adm.Close()
		_, _ = adm.DeleteTopics(context.WithoutCancel(ctx), topic)
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Kafka.Addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	value := make([]byte, 230)
	for i := range value {
		value[i] = 'x'
	}
	for i := range records {
		key := []byte(strconv.Itoa(i % 1000))
		cl.Produce(ctx, &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(strconv.Itoa(i))}}}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("warming the broker up: %w", err)
	}
	e.log.Info("broker warmed up", "records", records, "seconds", time.Since(start).Seconds())
	return e.warmTransactions(ctx, topic, value, records/10)
}

// warmTransactions sends records through Kafka transactions. The first
// transactional producer on a cluster creates the transaction state topic
// and loads its coordinator: without this, outboxd-eos's first drain paid
// for both and ran far slower than the drains after it.
func (e *env) warmTransactions(ctx context.Context, topic string, value []byte, records int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Kafka.Addr), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("bench.warmup"))
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	const perTxn = 2000
	for i := 0; i < records; i += perTxn {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("warming transactions up: %w", err)
		}
		for j := i; j < min(i+perTxn, records); j++ {
			cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(j % 1000)), Value: value}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			return fmt.Errorf("warming transactions up: %w", err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return fmt.Errorf("warming transactions up: %w", err)
		}
	}
	e.log.Info("transactions warmed up", "records", records, "seconds", time.Since(start).Seconds())
	return nil
}
