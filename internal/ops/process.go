package ops

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterBudget exports the process's in-flight budget (pump.Budget),
// shared by its pipelines, without a pipeline label: what it allows,
// maxRecords records and maxBytes bytes, beside what every pipeline holds
// (outboxd_in_flight_bytes and outboxd_in_flight_records, summed).
func RegisterBudget(reg prometheus.Registerer, maxRecords, maxBytes int) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outboxd_in_flight_budget_bytes",
			Help: "The process's in-flight budget in key, value and header bytes (--in-flight-budget-bytes), shared by its pipelines."},
			func() float64 { return float64(maxBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outboxd_in_flight_budget_records",
			Help: "The process's in-flight budget in records (--in-flight-budget-records), shared by its pipelines."},
			func() float64 { return float64(maxRecords) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// RegisterBuildInfo exports outboxd_build_info: 1, with the build's
// version, VCS revision ("" when the build recorded none) and Go version
// as labels, so that a dashboard or an alert can tell which replicas run
// which build.
func RegisterBuildInfo(reg prometheus.Registerer, version, revision, goVersion string) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outboxd_build_info",
		Help:        "1, labelled with the build's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion}},
		func() float64 { return 1 }))
}

// RegisterUnrun exports what unrun reports of the slots outboxd's catalog
// records in the process's databases that no pipeline of it runs (fleet.
// Fleet.Unrun): how many, and the WAL they retain together.
func RegisterUnrun(reg prometheus.Registerer, unrun func() (slots int, retained int64)) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outboxd_unrun_slots",
			Help: "Replication slots outboxd's catalog records in the databases of this process's pipelines (of now, or removed since it started) that none of its pipelines runs: " +
				"left behind by a pipeline removed from the file, they retain WAL until dropped (the Warn log names each, with the SQL that drops it)."},
			func() float64 { n, _ := unrun(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outboxd_unrun_slots_retained_wal_bytes",
			Help: "The WAL those slots (outboxd_unrun_slots) retain together, in bytes."},
			func() float64 { _, b := unrun(); return float64(b) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
