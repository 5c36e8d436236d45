package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// prune --config prunes each pipeline's table by its own slot: rows one
// pipeline's Kafka acknowledged go, rows written to another while no
// publisher ran stay.
func TestPruneConfigPrunesEachPipelineByItsOwnSlot(t *testing.T) {
	t.Parallel()
	a, b := newWorld(t), newWorld(t)
	file := filepath.Join(t.TempDir(), "pipelines.yaml")
	writeFile(t, file, fmt.Sprintf("brokers: %s\nstatus-interval: 200ms\nwal-check-interval: 200ms\npipelines:\n"+
		"  - name: a\n    database-url: %s\n    slot: %s\n  - name: b\n    database-url: %s\n    slot: %s\n", a.brokers, a.url, a.slot, b.url, b.slot))
	p := startFile(t, file)
	for _, w := range []*world{a, b} {
		w.consumeAll(t, w.write(t, 2, 0), time.Minute)
		w.waitAcknowledgedPast(t)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Minute)
	owed := b.write(t, 2, 100) // in b's slot, not yet in Kafka
	time.Sleep(1100 * time.Millisecond)

	code, stdout, stderr := runOutboxd(t, nil, "prune", "--config", file, "--older-than", "1s", "--recovery-margin", "0s")
	if code != exitOK {
		t.Fatalf("prune --config: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := a.outboxIDs(t); len(got) != 0 {
		t.Errorf("a's table after prune holds %v, want nothing: Kafka acknowledged it all\n%s", got, stdout)
	}
	if got := b.outboxIDs(t); !slices.Equal(got, owed) {
		t.Errorf("b's table after prune holds %v, want exactly the unpublished %v\n%s", got, owed, stdout)
	}
	for _, want := range []string{"pipeline a (", "pipeline b (", "table public.outbox, slot " + b.slot} {
		if !strings.Contains(stdout, want) {
			t.Errorf("prune --config's report lacks %q:\n%s", want, stdout)
		}
	}
	if code, _, stderr := runOutboxd(t, nil, "prune", "--config", file, "--slot", "x"); code != exitUsage || !strings.Contains(stderr, "--slot beside --config") {
		t.Errorf("prune --config --slot: exit %d, %q; want %d refusing --slot", code, stderr, exitUsage)
	}
}
