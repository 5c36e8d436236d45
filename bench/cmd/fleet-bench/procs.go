package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/bench/internal/servers"
	"github.com/outboxd/outboxd/harness/procstat"
)

// proc is one running `outboxd run`, Debezium's Kafka Connect worker, or
// slot-reader.
type proc struct {
	cmd       *exec.Cmd
	addr      string        // its --metrics-addr, where GET /pipelines answers
	pipelines int           // how many it runs
	done      chan struct{} // closed once it exited
	err       error         // its exit, once done
	out       *bytes.Buffer // slot-reader's standard output (floor.go)
}

// group is the processes of one measurement: A's one, B's one a pipeline,
// the reference's one, C's one, D's Kafka Connect worker, or F's or F1's
// slot-reader.
type group struct {
	name     string
	procs    []*proc
	ps       []pipeline
	launched time.Time
	// reader says the group is slot-reader (floor.go): no consumer, no
	// Kafka; it counts and times what it receives itself.
	reader bool
}

// slots are the group's pipelines' slots.
func (g *group) slots() []string { return slotsOf(g.ps) }

func slotsOf(ps []pipeline) []string {
	slots := make([]string, len(ps))
	for i, p := range ps {
		slots[i] = p.slot
	}
	return slots
}

// launchA starts one `outboxd run --config` with every pipeline of the
// fleet.
func (b *bench) launchA() (*group, error) {
	return b.launch("A", b.fleet, [][]string{{"run", "--config", b.file}}, len(b.fleet))
}

// launchB starts one `outboxd run` a pipeline of the fleet, with the
// settings A's file gives it.
func (b *bench) launchB() (*group, error) {
	cmds := make([][]string, len(b.fleet))
	for i, p := range b.fleet {
		cmds[i] = b.runFlags(p)
	}
	return b.launch("B", b.fleet, cmds, 1)
}

// launchReference starts the single pipeline the load compares A with.
func (b *bench) launchReference() (*group, error) {
	return b.launch("single", []pipeline{b.ref}, [][]string{b.runFlags(b.ref)}, 1)
}

// launch starts a process for each command, one after another, each with
// a --metrics-addr of its own; on a failure it stops those it started.
func (b *bench) launch(name string, ps []pipeline, cmds [][]string, pipelinesEach int) (_ *group, err error) {
	g := &group{name: name, ps: ps, launched: time.Now()}
	defer func() {
		if err != nil {
			_ = g.stop() // the launch's error says more
		}
	}()
	for _, args := range cmds {
		if b.nextPort == 0 {
			b.nextPort = servers.FirstPort
		}
		addr, err := servers.FreeAddrFrom(&b.nextPort)
		if err != nil {
			return nil, fmt.Errorf("launching %s: %w", name, err)
		}
		cmd := exec.Command(b.o.outboxd, slices.Concat(args, []string{"--metrics-addr", addr})...)
		if err := g.start(cmd, addr, pipelinesEach); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// start starts cmd as one of g's processes, running pipelines of g's
// pipelines; addr is where its GET /pipelines answers ("" for none).
func (g *group) start(cmd *exec.Cmd, addr string, pipelines int) error {
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("launching %s: %w", g.name, err)
	}
	p := &proc{cmd: cmd, addr: addr, pipelines: pipelines, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	g.procs = append(g.procs, p)
	return nil
}

// pids are the group's processes.
func (g *group) pids() []int {
	pids := make([]int, len(g.procs))
	for i, p := range g.procs {
		pids[i] = p.cmd.Process.Pid
	}
	return pids
}

// exited is the first process of g that is no longer running, as an error.
func (g *group) exited() error {
	for _, p := range g.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s: %s (pid %d) exited: %v", g.name, filepath.Base(p.cmd.Path), p.cmd.Process.Pid, p.err)
		default:
		}
	}
	return nil
}

// peakRSS is the sum of the processes' own peak resident sets (VmHWM): for
// many processes, at least the peak of their sum, since their peaks need
// not coincide.
func (g *group) peakRSS() (int64, error) {
	var sum int64
	for _, pid := range g.pids() {
		rss, err := procstat.PeakRSS(pid)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", g.name, err)
		}
		sum += rss
	}
	return sum, nil
}

// stopGrace is how long a process may take to drain and confirm after
// SIGTERM before it is killed.
const stopGrace = time.Minute

// stop sends SIGTERM to every process at once, as an orchestrator stopping
// them would, and waits for them to exit, killing those still running
// after stopGrace.
func (g *group) stop() error {
	for _, p := range g.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(stopGrace)
	var errs []error
	for _, p := range g.procs {
		select {
		case <-p.done:
			continue
		case <-time.After(time.Until(deadline)):
		}
		_ = p.cmd.Process.Kill()
		<-p.done
		errs = append(errs, fmt.Errorf("%s: %s (pid %d) killed, still running %s after SIGTERM", g.name, filepath.Base(p.cmd.Path), p.cmd.Process.Pid, stopGrace))
	}
	return errors.Join(errs...)
}

// sleep waits d, or less if ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
