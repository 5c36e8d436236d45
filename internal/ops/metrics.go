package ops

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/cdc"
)

// StatsSource is what the metrics read from the pipeline.
type StatsSource interface {
	Stats() cdc.Stats
}

// RetainedWAL reports the WAL the slot retains (-1 when unknown).
type RetainedWAL interface {
	Retained() int64
}

// Counts are what the metrics read besides the stream and the slot: the
// counters kept outside the pipeline (Kafka's data-loss reports, the
// heartbeats written, the exactly-once sink's transactions; nil: not
// running), Kafka's reachability and the supervisor's word.
type Counts struct {
	DataLoss   func() uint64
	Heartbeats func() uint64
	// KafkaTransactions counts committed Kafka transactions and
	// SkippedRecords the records a committed one already held
	// (--delivery exactly-once).
	KafkaTransactions func() uint64
	SkippedRecords    func() uint64
	// Panics counts the pipeline's panics (a supervisor's restarts after
	// a bug; nil: none kept).
	Panics func() uint64
	// Kafka reports the producer's failed dials and requests (nil: none
	// known).
	Kafka KafkaReach
	// Supervision, when set, adds the supervisor's states to outboxd_state
	// (nil: the stream's alone).
	Supervision Supervision
}

// KafkaReach is what the metrics and /readyz learn of the Kafka clients'
// connections (publish.Reachability).
type KafkaReach interface {
	// ConnectionErrors counts the dials and requests to Kafka that failed.
	ConnectionErrors() uint64
	// UnreachableSince is when the first of them failed after the last
	// that succeeded; zero while the last one succeeded.
	UnreachableSince() time.Time
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
// reg is refused until its Metrics are unregistered.
func NewMetrics(reg prometheus.Registerer, name string, src StatsSource, wal RetainedWAL, counts Counts) (*Metrics, error) {
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
	stat := func() cdc.Stats { return src.Stats() }
	gauge := func(name, help string, f func(cdc.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(stat()) })
	}
	counter := func(name, help string, f func(cdc.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(stat()) })
	}
	kafka := counts.Kafka
	if kafka == nil {
		kafka = noKafkaReach{}
	}
	optional := func(name, help string, f func() uint64) prometheus.Collector {
		if f == nil {
			f = func() uint64 { return 0 }
		}
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	cs := []prometheus.Collector{m.records, m.bytes, m.deadLettered, m.produceLatency, m.commitToAck, m.commitToRecv, m.commitToSend,
		optional("outboxd_kafka_data_loss_total", "Times Kafka reported losing records it had acknowledged (see the Error log).", counts.DataLoss),
		optional("outboxd_heartbeats_total", "Heartbeat messages written (--heartbeat-interval).", counts.Heartbeats),
		optional("outboxd_kafka_transactions_total", "Kafka transactions committed (--delivery exactly-once).", counts.KafkaTransactions),
		optional("outboxd_panics_total", "Times the pipeline panicked (a bug in outboxd: the Error log has the stack); it stopped and started again after a backoff, "+
			"the other pipelines untouched.", counts.Panics),
		optional("outboxd_skipped_records_total", "Records not sent again because a committed Kafka transaction holds them (--delivery exactly-once, after a restart or takeover).", counts.SkippedRecords),
		gauge("outboxd_backfill_rows", "Rows of the backfill (--backfill-where) this process handed to Kafka so far; 0 when none ran.", func(s cdc.Stats) float64 { return float64(s.BackfillRows) }),
		gauge("outboxd_backfill_rows_total", "Rows the backfill's predicate matched in the snapshot; 0 when none ran.", func(s cdc.Stats) float64 { return float64(s.BackfillTotal) }),
		counter("outboxd_transactions_total", "Committed transactions received from the slot.", func(s cdc.Stats) float64 { return float64(s.Transactions) }),
		counter("outboxd_reconnects_total", "Replication sessions that ended in a lost connection and were retried.", func(s cdc.Stats) float64 { return float64(s.Reconnects) }),
		gauge("outboxd_in_flight_records", "Records handed to Kafka and not yet acknowledged.", func(s cdc.Stats) float64 { return float64(s.InFlightRecords) }),
		gauge("outboxd_in_flight_bytes", "Key, value and header bytes of those records.", func(s cdc.Stats) float64 { return float64(s.InFlightBytes) }),
		gauge("outboxd_confirmed_lsn", "The flush position last confirmed to PostgreSQL (WAL byte position).", func(s cdc.Stats) float64 { return float64(s.ConfirmedLSN) }),
		gauge("outboxd_replication_lag_bytes", "Server WAL end minus the confirmed position.", func(s cdc.Stats) float64 { return float64(s.LagBytes()) }),
		gauge("outboxd_replication_lag_seconds", "While records are in flight (outboxd_in_flight_records > 0): now minus the commit time of the oldest of them, in stream order, "+
			"i.e. the age of the record Kafka has kept waiting longest (now minus the newest acknowledged commit if that record has no commit time: a dead letter of a row outside any transaction). "+
			"0 when nothing is in flight: everything received is acknowledged.", func(s cdc.Stats) float64 { return s.LagSeconds(time.Now()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outboxd_kafka_unreachable_seconds", Help: "Seconds since the first dial or request to Kafka that failed after the last one that succeeded (pings included); " +
			"0 while the last one succeeded or before any. Above 0: Kafka is unreachable and records wait (none is lost; the slot is not confirmed past them)."},
			func() float64 { return unreachableSeconds(kafka, time.Now()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outboxd_slot_retained_wal_bytes", Help: "WAL the replication slot keeps on the server (current WAL minus restart_lsn); -1 before the first check."}, func() float64 { return float64(wal.Retained()) }),
		errorsCollector{src, kafka},
		stateCollector{src, counts.Supervision},
	}
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

var errorsDesc = prometheus.NewDesc("outboxd_errors_total", "Errors by kind: connection (retried: replication sessions lost, as outboxd_reconnects_total, "+
	"plus dials and requests to Kafka that failed), permanent (stopped the run).", []string{"kind"}, nil)

// errorsCollector exports the streamer's error counters and the Kafka
// clients' failed dials and requests with a kind label.
type errorsCollector struct {
	src   StatsSource
	kafka KafkaReach
}

func (c errorsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- errorsDesc }
func (c errorsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(s.Reconnects+c.kafka.ConnectionErrors()), "connection")
	ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(s.PermanentErrors), "permanent")
}

// unreachableSeconds is outboxd_kafka_unreachable_seconds at now.
func unreachableSeconds(k KafkaReach, now time.Time) float64 {
	since := k.UnreachableSince()
	if since.IsZero() {
		return 0
	}
	return max(0, now.Sub(since).Seconds())
}

// noKafkaReach stands for a KafkaReach not given: nothing failed.
type noKafkaReach struct{}

func (noKafkaReach) ConnectionErrors() uint64    { return 0 }
func (noKafkaReach) UnreachableSince() time.Time { return time.Time{} }
