// Package monitoring holds outboxd's Prometheus alerting rules
// (alerts.yaml) and Grafana dashboard (dashboard.json), and the tests that
// keep them true: every expression parses, and every metric, label and
// label value they select is one a running outboxd exports. It is a module
// of its own so that Prometheus's parser stays out of the product's
// go.mod.
package monitoring
