package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/ops"
)

// slotActive reads whether a process holds w's slot.
func slotActive(t *testing.T, w *world) bool {
	t.Helper()
	var active bool
	if err := w.pool.QueryRow(t.Context(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&active); err != nil {
		t.Fatal(err)
	}
	return active
}

// pipelineEntry is the pipeline's entry in /pipelines (zero when absent).
func pipelineEntry(t *testing.T, addr, name string) ops.PipelineStatus {
	t.Helper()
	_, body := get(addr, "/pipelines")
	var st ops.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/pipelines: %v\n%s", err, body)
	}
	for _, p := range st.Pipelines {
		if p.Name == name {
			return p
		}
	}
	return ops.PipelineStatus{}
}

// onceEach checks that every id of want arrived exactly once.
func onceEach(t *testing.T, count map[int64]int, want []int64) {
	t.Helper()
	if missing, dups := tally(count, want); missing > 0 || dups > 0 {
		t.Errorf("of %d rows, %d never reached Kafka and %d more than once; want each once", len(want), missing, dups)
	}
}

// Issue 53: `run` without a pipelines file pauses on SIGUSR1 (drains,
// confirms, lets the slot go, reads nothing) and resumes on SIGUSR2 from
// the confirmed position: every row once, in both delivery modes.
func TestRunPausesOnSIGUSR1AndResumesOnSIGUSR2(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			var args []string
			if mode == "exactly-once" {
				args = eosArgs(t, w)
			}
			p := w.start(t, append(args, "--metrics-addr", anyPort, "--wal-check-interval", "1s")...)
			status := func() string {
				out, _ := exec.Command(builtBinary, "status", "--database-url", w.url, "--slot", w.slot).CombinedOutput()
				return string(out)
			}
			addr := servedAt(t, p.log)
			ids := w.write(t, 10, 0)
			if count, _ := w.consumeAll(t, ids, time.Minute, readCommitted); len(count) != len(ids) {
				t.Fatalf("%d of %d rows in Kafka before the pause", len(count), len(ids))
			}
			if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			waitFor(t, time.Minute, "paused", func() bool { return pipelineStates(addr) == w.slot+": paused" })
			waitFor(t, time.Minute, "the slot let go", func() bool { return !slotActive(t, w) })
			waitFor(t, time.Minute, "the paused slot's WAL watched", func() bool {
				_, body := get(addr, "/metrics")
				return metric(body, w.slot, "outboxd_slot_retained_wal_bytes") >= 0
			})
			waitFor(t, time.Minute, "outboxd status saying since when the slot is paused", func() bool {
				return regexp.MustCompile(`(?m)^paused\s+since \d{4}-`).MatchString(status())
			})
			more := w.write(t, 10, 100)
			if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil { // again: said, nothing changes
				t.Fatal(err)
			}
			waitFor(t, time.Minute, "the second SIGUSR1 answered", func() bool { return strings.Contains(p.log(), "paused already") })
			if slotActive(t, w) {
				t.Error("the paused process holds the slot again")
			}
			if err := p.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			waitFor(t, time.Minute, "streaming again", func() bool { return pipelineStates(addr) == w.slot+": streaming" })
			waitFor(t, time.Minute, "the pause's record cleared once the slot is streamed again", func() bool {
				var cleared bool
				err := w.pool.QueryRow(t.Context(), `SELECT paused_at IS NULL FROM outboxd_slots WHERE slot_name = $1`, w.slot).Scan(&cleared)
				return err == nil && cleared
			})
			after := w.write(t, 10, 200)
			all := append(append(append([]int64{}, ids...), more...), after...)
			count, _ := w.consumeAll(t, all, time.Minute, readCommitted)
			onceEach(t, count, all)
			p.stop(t)
			if out := status(); strings.Contains(out, "paused") {
				t.Errorf("outboxd status of a slot resumed, then let go by a stop, says it is paused:\n%s", out)
			}
		})
	}
}

// Issue 53: in a pipelines file, paused: true and SIGHUP pause one
// pipeline (the other streams on), /pipelines says since when, and taking
// the key out resumes it: every row once.
func TestPausedKeyPausesOnePipelineOfAFile(t *testing.T) {
	t.Parallel()
	a, b := newWorld(t), newWorld(t)
	dir := t.TempDir()
	head := fmt.Sprintf("brokers: %s\nstatus-interval: 200ms\nwal-check-interval: 1s\nmetrics-addr: %s\npipelines:\n", a.brokers, anyPort)
	entry := func(name string, w *world, extra string) string {
		return fmt.Sprintf("  - name: %s\n    database-url: %s\n    slot: %s\n%s", name, w.url, w.slot, extra)
	}
	file := filepath.Join(dir, "pipelines.yaml")
	writeFile(t, file, head+entry("a", a, "")+entry("b", b, ""))
	p := startFile(t, file)
	addr := servedAt(t, p.log)
	waitFor(t, time.Minute, "both streaming", func() bool { return pipelineStates(addr) == "a: streaming, b: streaming" })
	idsA := a.write(t, 10, 0)

	writeFile(t, file, head+entry("a", a, "    paused: true\n")+entry("b", b, ""))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "a paused, b streaming", func() bool { return pipelineStates(addr) == "a: paused, b: streaming" })
	moreA := a.write(t, 10, 100)
	waitFor(t, time.Minute, "/pipelines saying since when a is paused, and the rows written since waiting in its lag", func() bool {
		a := pipelineEntry(t, addr, "a")
		return strings.HasPrefix(a.Detail, "paused since ") && a.ConfirmedLSN != "0/0" && a.LagBytes > 0
	})
	if _, body := get(addr, "/metrics"); metric(body, "a", `outboxd_state{state="paused"}`) != 1 {
		t.Errorf(`outboxd_state{state="paused"} of a is not 1`)
	}
	waitFor(t, time.Minute, "a's slot let go", func() bool { return !slotActive(t, a) })
	idsB := b.write(t, 10, 0)
	if count, _ := b.consumeAll(t, idsB, time.Minute); len(count) != len(idsB) {
		t.Errorf("%d of %d rows of b in Kafka while a is paused", len(count), len(idsB))
	}

	writeFile(t, file, head+entry("a", a, "")+entry("b", b, ""))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "a resumed", func() bool { return pipelineStates(addr) == "a: streaming, b: streaming" })
	all := append(append([]int64{}, idsA...), moreA...)
	count, _ := a.consumeAll(t, all, time.Minute)
	onceEach(t, count, all)
	p.stop(t)
}
