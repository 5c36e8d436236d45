package ops

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/cdc"
)

type noStats struct{}

func (noStats) Stats() cdc.Stats { return cdc.Stats{} }
func (noStats) Retained() int64  { return -1 }

// newMetrics registers a pipeline's metrics under name on a registry of
// its own, and returns both.
func newMetrics(t *testing.T, name string, src StatsSource, counts Counts) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := NewRegistry()
	m, err := NewMetrics(reg, name, src, noStats{}, counts)
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
				m, reg := newMetrics(t, "orders", noStats{}, Counts{})
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
