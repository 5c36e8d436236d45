package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/outboxd/outboxd/internal/ops"
)

// streamLimit is how long a group may take from launch until every
// pipeline streams.
const streamLimit = 5 * time.Minute

// pollEvery is how often awaitStreaming asks each process still starting.
const pollEvery = 50 * time.Millisecond

// awaitStreaming asks every process of g for GET /pipelines until each
// lists its pipelines all streaming, and returns when it saw the last one
// do so. It fails when a process exits, or after streamLimit.
func awaitStreaming(ctx context.Context, g *group) (time.Time, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	pending := g.procs
	deadline := g.launched.Add(streamLimit)
	for {
		if err := g.exited(); err != nil {
			return time.Time{}, err
		}
		var still []*proc
		for _, p := range pending {
			if n, err := streaming(ctx, client, p.addr); err != nil || n < p.pipelines {
				still = append(still, p)
			}
		}
		if pending = still; len(pending) == 0 {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: %d of %d processes not streaming every pipeline %s after launch", g.name, len(pending), len(g.procs), streamLimit)
		}
		if err := sleep(ctx, pollEvery); err != nil {
			return time.Time{}, err
		}
	}
}

// streaming is how many pipelines GET /pipelines at addr lists as
// streaming.
func streaming(ctx context.Context, client *http.Client, addr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/pipelines", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err // not listening yet
	}
	defer resp.Body.Close()
	var st ops.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, fmt.Errorf("reading GET /pipelines at %s: %w", addr, err)
	}
	n := 0
	for _, p := range st.Pipelines {
		if p.State == "streaming" {
			n++
		}
	}
	return n, nil
}
