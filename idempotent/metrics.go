package idempotent

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the consumer's, named like outboxd's own
// (outboxd_consumer_*), labelled with the consumer's name.
type metrics struct {
	processed, duplicates, retries, deadLettered prometheus.Counter
	handlerSeconds                               prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, consumer string) (*metrics, error) {
	labels := prometheus.Labels{"consumer": consumer}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m := &metrics{
		processed:    counter("outboxd_consumer_processed_total", "Records whose handler ran and committed."),
		duplicates:   counter("outboxd_consumer_duplicates_total", "Records skipped because their key was processed before."),
		retries:      counter("outboxd_consumer_retries_total", "Attempts that failed and were retried."),
		deadLettered: counter("outboxd_consumer_dead_lettered_total", "Records sent to the dead-letter topic."),
		handlerSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "outboxd_consumer_handler_seconds",
			Help: "Time in the handler per record.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.processed, m.duplicates, m.retries, m.deadLettered, m.handlerSeconds} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("idempotent: registering metrics: %w", err)
	}
	return m, nil
}
