// Package ops serves what operators scrape and probe: Prometheus metrics at
// /metrics, liveness at /healthz and readiness at /readyz. It reads the
// streamer's counters and observes acknowledged records; it never changes
// what the pipeline does.
package ops
