package ops

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/pipeline"
)

// Source is a pipeline as the metrics read it: its status, one snapshot
// per scrape (pipeline.Pipeline, or package fleet's Member running one).
type Source interface {
	Status() pipeline.Status
}

// Metrics holds one pipeline's Prometheus collectors, registered under
// its name. It implements pump.Observer for the per-topic counters and
// latency histograms.
type Metrics struct {
	reg        prometheus.Registerer  // the process's, labelling every series with the pipeline's name
	collectors []prometheus.Collector // registered on reg, for Unregister

	records        *prometheus.CounterVec
	bytes          *prometheus.CounterVec
	deadLettered   *prometheus.CounterVec
	produceLatency prometheus.Histogram
	commitToAck    prometheus.Histogram
	commitToRecv   prometheus.Histogram
	commitToSend   prometheus.Histogram

	published, deadLetters topicLabels
}

// The topic label of the per-topic series: a topic template can name any
// number of topics, and a label value per topic would grow the series
// without bound. The first maxTopics distinct topics of each series get
// their own; any other counts under otherTopics, and a topic that could
// not be read (a dead letter's) under unknownTopic (parentheses are never
// in a Kafka topic name).
const (
	maxTopics    = 100
	unknownTopic = "(unknown)"
	otherTopics  = "(other)"
)

// topicLabels hands out a series' topic label values, at most maxTopics.
type topicLabels struct {
	mu     sync.Mutex
	topics map[string]bool
}

// label is topic's label value.
func (l *topicLabels) label(topic string) string {
	// A label value must be valid UTF-8 (the client panics otherwise): a
	// topic column of a SQL_ASCII database can hold any bytes, and Kafka
	// refuses such a topic, so its record is dead-lettered.
	if topic == "" || !utf8.ValidString(topic) {
		return unknownTopic
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.topics[topic] {
		if len(l.topics) >= maxTopics {
			return otherTopics
		}
		if l.topics == nil {
			l.topics = map[string]bool{}
		}
		l.topics[topic] = true
	}
	return topic
}

// NewMetrics registers the metrics of the pipeline called name on reg
// (the process's, from NewRegistry), every series with the label
// pipeline=name: many pipelines share one registry, and Unregister takes
// one's series away and leaves the others'. A name already registered on
// reg is refused until its Metrics are unregistered. The pipeline's
// status is read from src once per scrape; outboxd_state has a series for
// each of states (and for the current state, listed or not).
func NewMetrics(reg prometheus.Registerer, name string, src Source, states []pipeline.State) (*Metrics, error) {
	if name == "" {
		return nil, errors.New("registering a pipeline's metrics: the pipeline has no name")
	}
	m := &Metrics{
		reg: prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": name}, reg),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_records_published_total", Help: "Records Kafka acknowledged, by topic: the first " + strconv.Itoa(maxTopics) + " distinct topics each, any other under (other) (bounded cardinality).",
		}, []string{"topic"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_bytes_published_total", Help: "Key, value and header bytes of the records Kafka acknowledged, by topic, as outboxd_records_published_total.",
		}, []string{"topic"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_dead_lettered_total", Help: "Records and rows sent to the dead-letter topic instead of their own, by the topic they were meant for: " +
				"(unknown) for a row whose topic could not be read; (other) for any topic after the first " + strconv.Itoa(maxTopics) + " distinct ones, which keep their own label (bounded cardinality).",
		}, []string{"topic"}),
		produceLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outboxd_produce_latency_seconds", Help: "From handing a record to the producer to Kafka's acknowledgment.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		commitToRecv: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outboxd_commit_to_receive_seconds",
			Help:    "From the PostgreSQL commit to outboxd decoding the transaction's commit message, one per transaction: the walsender's and the reader's share of the latency (commit_to_ack minus this is the producer's).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		commitToSend: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outboxd_commit_to_send_seconds",
			Help:    "From the PostgreSQL commit to the walsender sending the transaction's commit message (its own clock, from the stream), one per transaction: decoding's share of the latency (commit_to_receive minus this is the network's and the reader's).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		commitToAck: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outboxd_commit_to_ack_seconds", Help: "From the PostgreSQL commit to Kafka's acknowledgment of the record.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
	}
	cs := []prometheus.Collector{m.records, m.bytes, m.deadLettered, m.produceLatency, m.commitToAck, m.commitToRecv, m.commitToSend,
		statusCollector{src: src, states: states}}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			m.Unregister()
			return nil, fmt.Errorf("registering the metrics of pipeline %q: %w", name, err)
		}
		m.collectors = append(m.collectors, c)
	}
	return m, nil
}

// Unregister takes the pipeline's series off the registry; the other
// pipelines' stay. The pipeline's name may then be registered again.
func (m *Metrics) Unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}

// Received implements pump.Observer.
func (m *Metrics) Received(commitTime, sentTime time.Time) {
	m.commitToRecv.Observe(time.Since(commitTime).Seconds())
	if !sentTime.IsZero() {
		m.commitToSend.Observe(max(0, sentTime.Sub(commitTime).Seconds()))
	}
}

// DeadLettered implements pump.Observer.
func (m *Metrics) DeadLettered(topic string) {
	m.deadLettered.WithLabelValues(m.deadLetters.label(topic)).Inc()
}

// Acknowledged implements pump.Observer.
func (m *Metrics) Acknowledged(topic string, bytes int, produceLatency time.Duration, commitTime time.Time) {
	topic = m.published.label(topic)
	m.records.WithLabelValues(topic).Inc()
	m.bytes.WithLabelValues(topic).Add(float64(bytes))
	m.produceLatency.Observe(produceLatency.Seconds())
	m.commitToAck.Observe(time.Since(commitTime).Seconds())
}

// unreachableSeconds is outboxd_kafka_unreachable_seconds at now.
func unreachableSeconds(k pipeline.KafkaStatus, now time.Time) float64 {
	return sinceSeconds(k.UnreachableSince, now)
}

// sinceSeconds is now minus since in seconds, 0 for a zero since.
func sinceSeconds(since, now time.Time) float64 {
	if since.IsZero() {
		return 0
	}
	return max(0, now.Sub(since).Seconds())
}
