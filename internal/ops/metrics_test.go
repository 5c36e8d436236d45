package ops

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/registry"
	"github.com/outboxd/outboxd/slot"
)

// fixed is a pipeline whose status is s.
type fixed struct{ s pipeline.Status }

func (f fixed) Status() pipeline.Status { return f.s }

// newMetrics registers a pipeline's metrics under name on a registry of
// its own, with outboxd_state's series for states, and returns both.
func newMetrics(t *testing.T, name string, src Source, states ...pipeline.State) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := NewRegistry()
	m, err := NewMetrics(reg, name, src, states)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// deadLettered returns outboxd_dead_lettered_total by topic label.
func deadLettered(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	return byTopic(t, reg, "outboxd_dead_lettered_total")
}

// byTopic returns the counter name by topic label.
func byTopic(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "topic" {
					got[l.GetValue()] += s.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}

// Issue 37 items 12 and 18: outboxd_dead_lettered_total had an empty topic
// label for a row whose topic could not be read, and a label value per
// topic, unbounded under a topic template. The label is never empty, and
// has at most maxTopics values besides (unknown) and (other). Issue 49,
// item 11: outboxd_records_published_total and
// outboxd_bytes_published_total were still unbounded; they are bounded
// alike.
func TestTopicLabelsAreBounded(t *testing.T) {
	t.Parallel()
	many := make([]string, 10*maxTopics)
	for i := range many {
		many[i] = fmt.Sprintf("orders.%d", i)
	}
	tests := []struct {
		name   string
		topics []string           // one dead letter each, reported concurrently
		want   map[string]float64 // nil: check the bound instead
	}{
		{name: "a row whose topic could not be read", topics: []string{""}, want: map[string]float64{unknownTopic: 1}},
		{name: "a few topics", topics: []string{"a", "b", "a", ""}, want: map[string]float64{"a": 2, "b": 1, unknownTopic: 1}},
		// Regression (issue 37): a topic of invalid UTF-8 (a SQL_ASCII
		// database's topic column) made the metrics client panic.
		{name: "a topic of invalid UTF-8", topics: []string{"\xff\xfeorders"}, want: map[string]float64{unknownTopic: 1}},
		{name: "a topic template naming many topics", topics: append(many, "")},
	}
	series := []struct {
		name   string
		report func(m *Metrics, topic string)
	}{
		{"outboxd_dead_lettered_total", func(m *Metrics, topic string) { m.DeadLettered(topic) }},
		{"outboxd_records_published_total", func(m *Metrics, topic string) { m.Acknowledged(topic, 1, 0, time.Now()) }},
		{"outboxd_bytes_published_total", func(m *Metrics, topic string) { m.Acknowledged(topic, 1, 0, time.Now()) }},
	}
	for _, ser := range series {
		for _, tt := range tests {
			t.Run(ser.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				m, reg := newMetrics(t, "orders", fixed{pipeline.Status{RetainedWAL: -1}})
				var wg sync.WaitGroup
				for _, topic := range tt.topics {
					wg.Go(func() { ser.report(m, topic) })
				}
				wg.Wait()
				got := byTopic(t, reg, ser.name)
				if _, ok := got[""]; ok {
					t.Errorf("an empty topic label, on %v", got[""])
				}
				if tt.want != nil {
					if !maps.Equal(got, tt.want) {
						t.Errorf("%s = %v, want %v", ser.name, got, tt.want)
					}
					return
				}
				var own, total float64
				for label, n := range got {
					total += n
					if label != unknownTopic && label != otherTopics {
						own++
					}
				}
				if own != maxTopics || got[otherTopics] != float64(len(many)-maxTopics) ||
					got[unknownTopic] != 1 || total != float64(len(tt.topics)) {
					t.Errorf("%v topics with a label of their own, (other) %v, (unknown) %v, total %v; want %d, %d, 1, %d",
						own, got[otherTopics], got[unknownTopic], total, maxTopics, len(many)-maxTopics, len(tt.topics))
				}
			})
		}
	}
}

// TestStatusSeries: each part of a pipeline's status reaches its series,
// read from one snapshot per scrape. Issue 50: the schema-registry
// stage's counts reached no metric.
func TestStatusSeries(t *testing.T) {
	t.Parallel()
	now := time.Now()
	st := pipeline.Status{
		State:      pipeline.StateStreaming,
		Stream:     cdc.Stats{Reconnects: 2, ConfirmedLSN: 1000, ServerWALEnd: 1500, BackfillRows: 7, BackfillTotal: 9},
		Window:     pump.Stats{InFlightRecords: 3, InFlightBytes: 300, Transactions: 11, OldestInFlightCommit: now.Add(-time.Minute)},
		Sink:       pipeline.SinkStatus{DataLoss: 1, KafkaTransactions: 5, SkippedRecords: 4, HangingSince: now.Add(-2 * time.Minute)},
		Registry:   registry.Stats{Encoded: 12, Refused: 13},
		Kafka:      pipeline.KafkaStatus{ConnectionErrors: 3},
		Heartbeats: 6, RetainedWAL: 4096, PermanentErrors: 8, Panics: 1,
		Decoding: slot.DecodingStandby,
	}
	_, reg := newMetrics(t, "orders", fixed{st})
	for _, tt := range []struct {
		series string
		labels []string
		want   float64
	}{
		{"outboxd_kafka_data_loss_total", nil, 1},
		{"outboxd_heartbeats_total", nil, 6},
		{"outboxd_kafka_transactions_total", nil, 5},
		{"outboxd_skipped_records_total", nil, 4},
		{"outboxd_panics_total", nil, 1},
		{"outboxd_schema_encoded_total", nil, 12},
		{"outboxd_schema_refused_total", nil, 13},
		{"outboxd_backfill_rows", nil, 7},
		{"outboxd_decoding_on_standby", nil, 1},
		{"outboxd_backfill_rows_total", nil, 9},
		{"outboxd_transactions_total", nil, 11},
		{"outboxd_reconnects_total", nil, 2},
		{"outboxd_in_flight_records", nil, 3},
		{"outboxd_in_flight_bytes", nil, 300},
		{"outboxd_confirmed_lsn", nil, 1000},
		{"outboxd_replication_lag_bytes", nil, 500},
		{"outboxd_slot_retained_wal_bytes", nil, 4096},
		{"outboxd_errors_total", []string{"kind", "connection"}, 5},
		{"outboxd_errors_total", []string{"kind", "permanent"}, 8},
		{"outboxd_state", []string{"state", "streaming"}, 1},
	} {
		if got := sample(t, reg, "orders", tt.series, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.series, tt.labels, got, tt.want)
		}
	}
	if got := sample(t, reg, "orders", "outboxd_kafka_hanging_transaction_seconds"); got < 120 {
		t.Errorf("outboxd_kafka_hanging_transaction_seconds = %v with a transaction hanging for two minutes, want at least 120", got)
	}
	if got := sample(t, reg, "orders", "outboxd_replication_lag_seconds"); got < 60 {
		t.Errorf("outboxd_replication_lag_seconds = %v with a record committed a minute ago in flight, want at least 60", got)
	}
}
