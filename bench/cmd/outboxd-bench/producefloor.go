package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"

	"github.com/outboxd/outboxd/bench/internal/stats"
)

// produceFloor is outboxd's Kafka side alone at one steady rate
// (bench/cmd/producecost: outboxd's producer handing over transactions of
// -transaction-size records at the rate, GOMAXPROCS 1), over the repetitions: what
// outboxd costs before it reads or decodes anything, and the broker's and
// producer's share of its latency.
type produceFloor struct {
	Rate        int     `json:"events_per_second"`
	Runs        int     `json:"runs"`
	CPUMedianUs float64 `json:"cpu_us_per_event_median"`
	CPUMinUs    float64 `json:"cpu_us_per_event_min"`
	CPUMaxUs    float64 `json:"cpu_us_per_event_max"`
	AckP50Ms    float64 `json:"ack_p50_ms_median"`
	AckP99Ms    float64 `json:"ack_p99_ms_median"`
	AckP99MinMs float64 `json:"ack_p99_ms_min"`
	AckP99MaxMs float64 `json:"ack_p99_ms_max"`
}

// measureProduceFloors runs producecost reps times at each rate against
// the run's broker.
func (e *env) measureProduceFloors(ctx context.Context, rates []int, reps int) ([]produceFloor, error) {
	bin, cleanup, err := buildTool(ctx, "producecost")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	topic := "bench.producecost"
	if err := e.CreateTopics(ctx, topic); err != nil {
		return nil, err
	}
	// Unmeasured: the new topic's partitions and the broker's first
	// requests to them, which would otherwise weigh on the first rate's
	// acknowledgment latency.
	if out, err := exec.CommandContext(ctx, bin, "-brokers", e.Kafka.Addr, "-topic", topic, "-rate", fmt.Sprint(rates[0]), "-transaction-size", fmt.Sprint(e.o.txSize), "-duration", "3s").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("warming producecost up: %w\n%s", err, out)
	}
	var floors []produceFloor
	for _, rate := range rates {
		var cpu, p50, p99 []float64
		for range max(1, reps) {
			out, err := exec.CommandContext(ctx, bin, "-brokers", e.Kafka.Addr, "-topic", topic, "-rate", fmt.Sprint(rate),
				"-transaction-size", fmt.Sprint(e.o.txSize), "-duration", e.o.rateDuration.String()).Output()
			if err != nil {
				return floors, fmt.Errorf("producecost at %d events/s: %w", rate, err)
			}
			var r struct {
				CPU float64 `json:"cpu_us_per_event"`
				P50 float64 `json:"ack_p50_ms"`
				P99 float64 `json:"ack_p99_ms"`
			}
			if err := json.Unmarshal(out, &r); err != nil {
				return floors, fmt.Errorf("producecost output %q: %w", out, err)
			}
			cpu, p50, p99 = append(cpu, r.CPU), append(p50, r.P50), append(p99, r.P99)
		}
		slices.Sort(cpu)
		slices.Sort(p50)
		slices.Sort(p99)
		floors = append(floors, produceFloor{Rate: rate, Runs: len(cpu), CPUMedianUs: stats.Median(cpu), CPUMinUs: cpu[0], CPUMaxUs: cpu[len(cpu)-1],
			AckP50Ms: stats.Median(p50), AckP99Ms: stats.Median(p99), AckP99MinMs: p99[0], AckP99MaxMs: p99[len(p99)-1]})
		e.log.Info("producer alone", "rate", rate, "cpu_us_per_event", fmt.Sprintf("%.1f", stats.Median(cpu)), "ack_p99_ms", stats.Median(p99))
	}
	return floors, nil
}
