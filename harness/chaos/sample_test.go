package chaos

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Regression test for issue 39: outboxd's series gained a pipeline label,
// and the sampler, which read unlabelled samples only, read no records in
// flight. It reads them by name, summed over the pipelines.
func TestScrapeReadsPipelineSeries(t *testing.T) {
	t.Parallel()
	page := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 12
go_gc_duration_seconds{quantile="0.5"} 0.001
outboxd_in_flight_records{pipeline="orders"} 3
outboxd_in_flight_records{pipeline="payments"} 4
outboxd_state{pipeline="orders",state="streaming"} 1
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page) }))
	t.Cleanup(srv.Close)
	got, err := scrape(t.Context(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"go_goroutines": 12, "outboxd_in_flight_records": 7}
	if !maps.Equal(got, want) {
		t.Errorf("scrape = %v, want %v", got, want)
	}
}
