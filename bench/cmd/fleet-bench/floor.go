package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/outboxd/outboxd/bench/internal/receipts"
)

// The floor steps: F streams the fleet's slots, F1 the single pipeline's,
// each in one slot-reader process (bench/cmd/slot-reader), which reads them
// as outboxd's readers do (pgoutput through pglogrepl on pgconn, one
// connection a slot) and does nothing with what it receives. Beside A and
// the single pipeline at the same load, they show what reading the slots
// costs before outboxd does anything with the events: the floor under
// outboxd's CPU per event, and under its latency without Kafka.

// launchFloor starts slot-reader on the fleet's slots (F) or the single
// pipeline's (F1).
func (b *bench) launchFloor(step string) (*group, error) {
	ps := b.fleet
	if step == "F1" {
		ps = []pipeline{b.ref}
	}
	var args []string
	for _, p := range ps {
		args = append(args, b.DatabaseURL(p.db), p.slot)
	}
	g := &group{name: step, ps: ps, reader: true}
	cmd := exec.Command(b.o.slotReader, args...)
	// One thread running Go, as every outboxd of the bench runs
	// (--max-procs 1): more costs a fleet more wake-ups per event.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	out := &bytes.Buffer{}
	cmd.Stdout = out
	if err := g.start(cmd, "", len(ps)); err != nil {
		return nil, err
	}
	g.procs[0].out = out
	return g, nil
}

// restartCounts asks the reader of g to count anew (SIGUSR1): from the
// measured run's first write.
func restartCounts(g *group) error {
	if err := g.procs[0].cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return fmt.Errorf("%s: restarting the reader's counts: %w", g.name, err)
	}
	return nil
}

// readerCounts stops the reader of g and returns what it counted since
// the measured run started (restartCounts).
func readerCounts(g *group) (receipts.Report, error) {
	var r receipts.Report
	if err := g.stop(); err != nil {
		return r, err
	}
	p := g.procs[0]
	if p.err != nil {
		return r, fmt.Errorf("%s: slot-reader exited: %w", g.name, p.err)
	}
	if err := json.Unmarshal(bytes.TrimSpace(p.out.Bytes()), &r); err != nil {
		return r, fmt.Errorf("%s: reading slot-reader's counts %q: %w", g.name, p.out.String(), err)
	}
	return r, nil
}
