package main

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// stageMetrics are outboxd's per-stage latency histograms, in the order an
// event passes them. The bench reads them from /metrics at the start and
// end of each steady run, so that a slow tail can be placed: decoding,
// network and reader, producer and broker.
var stageMetrics = []struct{ name, stage string }{
	{"outboxd_commit_to_send_seconds", "commit to walsender send"},
	{"outboxd_commit_to_receive_seconds", "commit to outboxd receipt"},
	{"outboxd_produce_latency_seconds", "handed to the producer to Kafka ack"},
	{"outboxd_commit_to_ack_seconds", "commit to Kafka ack"},
}

// stageLatency is one stage over one steady run.
type stageLatency struct {
	Stage string  `json:"stage"`
	Count uint64  `json:"count"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
}

// bucket is a cumulative histogram bucket.
type bucket struct {
	le    float64 // upper bound, seconds (+Inf for the last)
	count uint64
}

// histSnapshot is each stage histogram's buckets at one moment.
type histSnapshot map[string][]bucket

// scrapeStages reads the stage histograms from outboxd's /metrics.
func scrapeStages(addr string) (histSnapshot, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	snap := histSnapshot{}
	for _, s := range stageMetrics {
		f := fams[s.name]
		if f == nil || len(f.GetMetric()) == 0 || f.GetMetric()[0].GetHistogram() == nil {
			continue // an older binary (the baseline) may lack a stage
		}
		h := f.GetMetric()[0].GetHistogram()
		var bs []bucket
		for _, b := range h.GetBucket() {
			bs = append(bs, bucket{le: b.GetUpperBound(), count: b.GetCumulativeCount()})
		}
		snap[s.name] = append(bs, bucket{le: inf, count: h.GetSampleCount()})
	}
	return snap, nil
}

var inf = math.Inf(1)

// stagesBetween gives each stage's count, p50 and p99 over the observations
// made between two snapshots.
func stagesBetween(a, b histSnapshot) []stageLatency {
	var out []stageLatency
	for _, s := range stageMetrics {
		after, ok := b[s.name]
		if !ok {
			continue
		}
		delta := make([]bucket, len(after))
		for i, bk := range after {
			delta[i] = bk
			if before := a[s.name]; i < len(before) {
				delta[i].count -= before[i].count
			}
		}
		n := delta[len(delta)-1].count
		out = append(out, stageLatency{Stage: s.stage, Count: n, P50ms: 1000 * quantile(delta, 0.5), P99ms: 1000 * quantile(delta, 0.99)})
	}
	return out
}

// quantile estimates the q-quantile of cumulative buckets by linear
// interpolation inside the bucket that holds it, as Prometheus's
// histogram_quantile does; in the +Inf bucket it gives the highest finite
// bound. 0 when there are no observations.
func quantile(bs []bucket, q float64) float64 {
	if len(bs) == 0 || bs[len(bs)-1].count == 0 {
		return 0
	}
	rank := q * float64(bs[len(bs)-1].count)
	lower, below := 0.0, uint64(0)
	for i, b := range bs {
		if float64(b.count) >= rank {
			if b.le == inf {
				if i > 0 {
					return bs[i-1].le
				}
				return 0
			}
			in := b.count - below
			if in == 0 {
				return b.le
			}
			return lower + (b.le-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = b.le, b.count
	}
	return lower
}
