package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterValue reads a counter registered in reg by name (0 when absent).
func CounterValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
