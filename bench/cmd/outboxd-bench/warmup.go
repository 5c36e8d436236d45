package main

import (
	"context"
	"time"
)

// warmKafka warms the broker up (servers.WarmKafka) with records like the
// benchmark's, a tenth of them in Kafka transactions for the exactly-once
// systems.
func (e *env) warmKafka(ctx context.Context, records int) error {
	start := time.Now()
	if err := e.WarmKafka(ctx, records, records/10); err != nil {
		return err
	}
	e.log.Info("broker warmed up", "records", records, "transactional", records/10, "seconds", time.Since(start).Seconds())
	return nil
}
