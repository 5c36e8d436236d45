package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sample is the active publisher at one moment of a run, from its
// /metrics (Options.SampleEvery).
type Sample struct {
	Seconds         float64 `json:"seconds"` // since the run started
	RSSBytes        float64 `json:"rss_bytes"`
	Goroutines      float64 `json:"goroutines"`
	OpenFDs         float64 `json:"open_fds"`
	InFlightRecords float64 `json:"in_flight_records"`
	Events          int64   `json:"events"` // committed by the writers so far
}

// sampler scrapes the publisher's /metrics every period until ctx ends.
// A scrape that fails (the publisher restarting) is skipped.
func sample(ctx context.Context, addr string, every time.Duration, start time.Time, l *ledger, out *[]Sample) error {
	t := time.NewTicker(every)
	defer t.Stop()
	cl := &http.Client{Timeout: 5 * time.Second}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		m, err := scrape(ctx, cl, "http://"+addr+"/metrics")
		if err != nil {
			continue
		}
		*out = append(*out, Sample{Seconds: time.Since(start).Seconds(), RSSBytes: m["process_resident_memory_bytes"], Goroutines: m["go_goroutines"],
			OpenFDs: m["process_open_fds"], InFlightRecords: m["outboxd_in_flight_records"], Events: l.events.Load()})
	}
}

// scrape reads the unlabelled samples of a Prometheus text page, and
// outboxd's, labelled with their pipeline alone, by name: the sum over the
// pipelines, the process's.
func scrape(ctx context.Context, cl *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		series, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(series, "#") {
			continue
		}
		name, labels, labelled := strings.Cut(series, "{")
		if labelled && (!strings.HasPrefix(labels, `pipeline="`) || strings.Count(labels, `="`) != 1) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			m[name] += v
		}
	}
	return m, sc.Err()
}
