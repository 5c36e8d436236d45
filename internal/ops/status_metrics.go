package ops

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/pipeline"
)

// statusMetric is one series read from a pipeline's status.
type statusMetric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(s pipeline.Status, now time.Time) float64
}

func gaugeOf(name, help string, f func(pipeline.Status, time.Time) float64) statusMetric {
	return statusMetric{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, f}
}

func counterOf(name, help string, f func(pipeline.Status) uint64) statusMetric {
	return statusMetric{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, func(s pipeline.Status, _ time.Time) float64 { return float64(f(s)) }}
}

// statusMetrics are the series read from a pipeline's status, in the
// order they are collected.
var statusMetrics = []statusMetric{
	counterOf("outboxd_kafka_data_loss_total", "Times Kafka reported losing records it had acknowledged (see the Error log).",
		func(s pipeline.Status) uint64 { return s.Sink.DataLoss }),
	counterOf("outboxd_heartbeats_total", "Heartbeat messages written (--heartbeat-interval).",
		func(s pipeline.Status) uint64 { return s.Heartbeats }),
	counterOf("outboxd_kafka_transactions_total", "Kafka transactions committed (--delivery exactly-once).",
		func(s pipeline.Status) uint64 { return s.Sink.KafkaTransactions }),
	counterOf("outboxd_panics_total", "Times the pipeline panicked (a bug in outboxd: the Error log has the stack); it stopped and started again after a backoff, "+
		"the other pipelines untouched.", func(s pipeline.Status) uint64 { return s.Panics }),
	counterOf("outboxd_skipped_records_total", "Records not sent again because a committed Kafka transaction holds them (--delivery exactly-once, after a restart or takeover).",
		func(s pipeline.Status) uint64 { return s.Sink.SkippedRecords }),
	counterOf("outboxd_schema_encoded_total", "Records whose value or key the schema-registry stage encoded per its registered schema (--value-format, --key-format).",
		func(s pipeline.Status) uint64 { return s.Registry.Encoded }),
	counterOf("outboxd_schema_refused_total", "Records the schema-registry stage refused: their value or key did not fit the registered schema, or its subject does not exist "+
		"(dead-lettered with a dead-letter topic, else the pipeline stopped; the Error log says why).", func(s pipeline.Status) uint64 { return s.Registry.Refused }),
	gaugeOf("outboxd_backfill_rows", "Rows of the backfill (--backfill-where) this process handed to Kafka so far; 0 when none ran.",
		func(s pipeline.Status, _ time.Time) float64 { return float64(s.Stream.BackfillRows) }),
	gaugeOf("outboxd_backfill_rows_total", "Rows the backfill's predicate matched in the snapshot; 0 when none ran.",
		func(s pipeline.Status, _ time.Time) float64 { return float64(s.Stream.BackfillTotal) }),
	counterOf("outboxd_transactions_total", "Committed transactions received from the slot.",
		func(s pipeline.Status) uint64 { return s.Window.Transactions }),
	counterOf("outboxd_reconnects_total", "Replication sessions that ended in a lost connection and were retried.",
		func(s pipeline.Status) uint64 { return s.Stream.Reconnects }),
	gaugeOf("outboxd_in_flight_records", "Records handed to Kafka and not yet acknowledged.",
		func(s pipeline.Status, _ time.Time) float64 { return float64(s.Window.InFlightRecords) }),
	gaugeOf("outboxd_in_flight_bytes", "Key, value and header bytes of those records.",
		func(s pipeline.Status, _ time.Time) float64 { return float64(s.Window.InFlightBytes) }),
	gaugeOf("outboxd_confirmed_lsn", "The flush position last confirmed to PostgreSQL (WAL byte position).",
		func(s pipeline.Status, _ time.Time) float64 { return float64(s.Stream.ConfirmedLSN) }),
	gaugeOf("outboxd_replication_lag_bytes", "Server WAL end minus the confirmed position.",
		func(s pipeline.Status, _ time.Time) float64 { return float64(s.LagBytes()) }),
	gaugeOf("outboxd_replication_lag_seconds", "While records are in flight (outboxd_in_flight_records > 0): now minus the commit time of the oldest of them, in stream order, "+
		"i.e. the age of the record Kafka has kept waiting longest (now minus the newest acknowledged commit if that record has no commit time: a dead letter of a row outside any transaction). "+
		"0 when nothing is in flight: everything received is acknowledged.", func(s pipeline.Status, now time.Time) float64 { return s.LagSeconds(now) }),
	gaugeOf("outboxd_kafka_unreachable_seconds", "Seconds since the first dial or request to Kafka that failed after the last one that succeeded (pings included); "+
		"0 while the last one succeeded or before any. Above 0: Kafka is unreachable and records wait (none is lost; the slot is not confirmed past them).",
		func(s pipeline.Status, now time.Time) float64 { return unreachableSeconds(s.Kafka, now) }),
	gaugeOf("outboxd_kafka_hanging_transaction_seconds", "--delivery exactly-once: seconds the last stable offset of a progress topic partition has stood still below its high watermark, "+
		"once that outlasted the transaction timeout (a hanging transaction: the Warn log names it and the command that aborts it); 0 otherwise. "+
		"While above 0, this pipeline's next start waits behind it, as does every read_committed consumer of the partition.",
		func(s pipeline.Status, now time.Time) float64 { return sinceSeconds(s.Sink.HangingSince, now) }),
	gaugeOf("outboxd_decoding_on_standby", "1 while the slot is decoded on a physical standby (--primary-url), as the slot check (--wal-check-interval) last found its server, "+
		"0 on a primary or before the first check.",
		func(s pipeline.Status, _ time.Time) float64 {
			if s.OnStandby() {
				return 1
			}
			return 0
		}),
	gaugeOf("outboxd_slot_retained_wal_bytes", "WAL the replication slot keeps on the server (current WAL minus restart_lsn); -1 before the first check.",
		func(s pipeline.Status, _ time.Time) float64 { return float64(s.RetainedWAL) }),
}

var errorsDesc = prometheus.NewDesc("outboxd_errors_total", "Errors by kind: connection (retried: replication sessions lost, as outboxd_reconnects_total, "+
	"plus dials and requests to Kafka that failed), permanent (stopped the run).", []string{"kind"}, nil)

var stateDesc = prometheus.NewDesc("outboxd_state", "1 for the current state of the pipeline, 0 for the others: the replication side's "+
	"(starting, streaming (active), standby, reconnecting, stopped) or, for a pipeline a supervisor runs, the supervisor's when it says one "+
	"(such as backing off after a failure). Kafka's side is outboxd_kafka_unreachable_seconds: streaming with it above 0 means reading the slot "+
	"while records wait for Kafka.", []string{"state"}, nil)

// statusCollector exports a pipeline's status: it reads it once per
// scrape, so that every series of one scrape is of one moment.
type statusCollector struct {
	src    Source
	states []pipeline.State // outboxd_state's series, besides the current state
}

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range statusMetrics {
		ch <- m.desc
	}
	ch <- errorsDesc
	ch <- stateDesc
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	s, now := c.src.Status(), time.Now()
	for _, m := range statusMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(s, now))
	}
	ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(s.Stream.Reconnects+s.Kafka.ConnectionErrors), "connection")
	ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(s.PermanentErrors), "permanent")
	states := append(slices.Clone(c.states), s.State) // the current state has its series, listed or not
	slices.Sort(states)
	for _, st := range slices.Compact(states) {
		v := 0.0
		if st == s.State {
			v = 1
		}
		m, err := prometheus.NewConstMetric(stateDesc, prometheus.GaugeValue, v, string(st))
		if err != nil { // a state that is no label value (invalid UTF-8)
			m = prometheus.NewInvalidMetric(stateDesc, err)
		}
		ch <- m
	}
}
