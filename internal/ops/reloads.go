package ops

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reloads is the outcome of the process's reloads of its pipelines file
// (SIGHUP, a setting file that changed), exported as Prometheus's own
// reloads are: outboxd_config_last_reload_successful and
// outboxd_config_last_reload_success_timestamp_seconds. A failed reload
// changes nothing, and the next start would refuse the same file: the
// alert on it says so before a restart does. Safe for concurrent use.
type Reloads struct {
	mu          sync.Mutex
	ok          bool
	lastSuccess time.Time
}

// NewReloads starts with the configuration loaded at start, at loaded.
func NewReloads(loaded time.Time) *Reloads { return &Reloads{ok: true, lastSuccess: loaded} }

// Set records a reload's outcome at t.
func (r *Reloads) Set(ok bool, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ok = ok
	if ok {
		r.lastSuccess = t
	}
}

var (
	reloadOKDesc = prometheus.NewDesc("outboxd_config_last_reload_successful",
		"1 when the last reload of the pipelines file (SIGHUP, or a file its settings come from that changed) succeeded or none was tried, 0 when it failed: "+
			"nothing changed then, and a restart would refuse the file (the Error log says why).", nil, nil)
	reloadTimeDesc = prometheus.NewDesc("outboxd_config_last_reload_success_timestamp_seconds",
		"When the pipelines file was last loaded successfully (at start, or by a reload), in seconds since 1970.", nil, nil)
)

// Describe implements prometheus.Collector.
func (r *Reloads) Describe(ch chan<- *prometheus.Desc) {
	ch <- reloadOKDesc
	ch <- reloadTimeDesc
}

// Collect implements prometheus.Collector.
func (r *Reloads) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	ok, at := r.ok, r.lastSuccess
	r.mu.Unlock()
	v := 0.0
	if ok {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(reloadOKDesc, prometheus.GaugeValue, v)
	ch <- prometheus.MustNewConstMetric(reloadTimeDesc, prometheus.GaugeValue, float64(at.UnixNano())/1e9)
}
