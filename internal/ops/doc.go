// Package ops serves what operators scrape and probe: Prometheus metrics at
// /metrics, liveness at /healthz, readiness at /readyz and the pipelines'
// state as JSON at /pipelines. It owns the process's registry and each
// pipeline's collectors on it, every series labelled with the pipeline's
// name, registered and unregistered as pipelines come and go. It reads
// each pipeline's one status value (pipeline.Status, a snapshot per
// scrape or probe) and observes acknowledged records; it never changes
// what a pipeline does.
package ops
