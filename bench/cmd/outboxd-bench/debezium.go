package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/bench/internal/steady"
	"github.com/outboxd/outboxd/harness/procstat"
)

// startDebezium starts Kafka Connect standalone with the connector through
// bench/debezium/run.sh with its settings for profile ("drain" or
// "latency"); it returns the JVM's pid, its working directory and the stop
// function.
// With exactlyOnce, Connect runs distributed with exactly-once source
// support (KIP-618, run.sh's DBZ_EXACTLY_ONCE).
func (e *env) startDebezium(ctx context.Context, db, slot, prefix, profile string, exactlyOnce bool) (pid int, work string, stop func(), err error) {
	work, err = os.MkdirTemp("", "outboxd-bench-dbz-")
	if err != nil {
		return 0, "", nil, err
	}
	host, port, err := e.HostPort()
	if err != nil {
		os.RemoveAll(work)
		return 0, "", nil, err
	}
	cmd := exec.CommandContext(ctx, e.o.debezium, "start", work, host, port, db, e.Kafka.Addr, prefix)
	cmd.Env = append(os.Environ(), "DBZ_PROFILE="+profile, "DBZ_SLOT_NAME="+slot)
	if exactlyOnce {
		cmd.Env = append(cmd.Env, "DBZ_EXACTLY_ONCE=1")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(work)
		return 0, "", nil, fmt.Errorf("starting Debezium: %w\n%s", err, out)
	}
	pid, _ = strconv.Atoi(strings.TrimSpace(lastLine(string(out))))
	return pid, work, func() {
		_, _ = exec.Command(e.o.debezium, "stop", work).CombinedOutput()
		os.RemoveAll(work)
	}, nil
}

// runDebezium times the drain until every event is in the routed topic;
// memory comes from /proc and CPU from its CPU-time clock (the JVM is not
// our child). With
// exactlyOnce, the end offsets also count the transactions' commit markers:
// once they reach the backlog, a read_committed consumer counts the records
// themselves and the drain ends when it has them all.
func (e *env) runDebezium(ctx context.Context, db, topic, slot string, exactlyOnce bool) (usage, error) {
	prefix := topic
	routed := steady.DebeziumTopic(prefix)
	if err := e.CreateTopics(ctx, routed); err != nil {
		return usage{}, err
	}
	defer func() {
		adm := e.Admin()
		defer adm.Close()
		_, _ = adm.DeleteTopics(context.WithoutCancel(ctx), routed)
	}()
	pid, work, stop, err := e.startDebezium(ctx, db, slot, prefix, "drain", exactlyOnce)
	if err != nil {
		return usage{}, err
	}
	defer stop()
	// One client for the polling: a new one every 50 ms would take CPU
	// from Debezium on the same cores.
	adm := e.Admin()
	defer adm.Close()
	deadline := time.Now().Add(15 * time.Minute)
	for {
		n, err := recordsIn(ctx, adm, routed)
		if err == nil && n >= int64(e.o.events) {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(work + "/connect.log")
			return usage{}, fmt.Errorf("the connector delivered %d of %d records within 15 minutes; log tail:\n%s", n, e.o.events, tail(string(log), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if exactlyOnce {
		if err := e.awaitCommitted(ctx, routed, int64(e.o.events), deadline); err != nil {
			return usage{}, err
		}
	}
	end := time.Now()
	rss, err := procstat.PeakRSS(pid)
	if err != nil {
		return usage{}, err
	}
	cpu, err := procstat.CPUSeconds(pid)
	if err != nil {
		return usage{}, err
	}
	return usage{end: end, maxRSS: rss, cpu: cpu}, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// awaitCommitted reads topic with read_committed isolation until it has
// read want records (control records are not returned), or the deadline.
func (e *env) awaitCommitted(ctx context.Context, topic string, want int64, deadline time.Time) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Kafka.Addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	var n int64
	for n < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("a read_committed consumer read %d of %d records", n, want)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		n += int64(cl.PollFetches(pctx).NumRecords())
		cancel()
	}
	return nil
}
