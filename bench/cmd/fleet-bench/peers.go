package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/outboxd/outboxd/bench/internal/steady"
)

// The steps beside Debezium: C is one `outboxd run --config` with
// -debezium-pipelines pipelines (d001 ...), D Debezium's PostgreSQL
// connector with its Outbox Event Router, one connector a database of C's,
// all on one Kafka Connect standalone worker (bench/debezium/run.sh
// start-many). Both take the same steady load spread over the same
// databases, each into its own outbox table, from its own slot, to its
// own topics.

// debeziumPipeline is p's database as Debezium streams it: the table and
// publication of bench/debezium/schema.sql, its own slot, and the topic its
// Outbox Event Router routes to from the prefix dbzPrefix(p).
func debeziumPipeline(p pipeline, txSize int) pipeline {
	return pipeline{name: p.name, db: p.db, slot: "dbz_" + p.name, topic: steady.DebeziumTopic(dbzPrefix(p)), insert: steady.DebeziumInsert(txSize)}
}

// dbzPrefix is the topic prefix D's connector for p is given.
func dbzPrefix(p pipeline) string { return "dbz." + p.name }

// setUpDebezium gives each of D's databases Debezium's outbox table and
// publication and creates its slot, so that it can be advanced before D's
// first launch as every other step's are.
func (b *bench) setUpDebezium(ctx context.Context) error {
	for _, p := range b.dbz {
		if err := b.SetUpDebezium(ctx, b.o.debezium, p.db, p.slot); err != nil {
			return err
		}
	}
	return nil
}

// launchC starts one `outboxd run --config` with C's pipelines.
func (b *bench) launchC() (*group, error) {
	return b.launch("C", b.peers, [][]string{{"run", "--config", b.peersFile}}, len(b.peers))
}

// launchD starts Debezium's Kafka Connect worker with a connector for each
// of D's databases, in the foreground of run.sh (the process is the JVM),
// with a working directory of its own under dir: no stored offsets, so
// each connector streams from its slot's confirmed position. Its profile
// is latency (poll.interval.ms 5, producer linger 0), as outboxd-bench's
// steady runs start Debezium.
func (b *bench) launchD(dir string) (_ *group, work string, err error) {
	g := &group{name: "D", ps: b.dbz, launched: time.Now()}
	if work, err = os.MkdirTemp(dir, "connect-"); err != nil {
		return nil, "", err
	}
	host, port, err := b.HostPort()
	if err != nil {
		return nil, "", err
	}
	args := []string{"start-many", work, host, port, b.Kafka.Addr}
	for _, p := range b.dbz {
		args = append(args, p.db+":"+p.slot+":"+dbzPrefix(p))
	}
	cmd := exec.Command(b.o.debezium, args...)
	cmd.Env = append(os.Environ(), "DBZ_FOREGROUND=1", "DBZ_PROFILE=latency")
	if err := g.start(cmd, "", len(b.dbz)); err != nil {
		return nil, "", err
	}
	return g, work, nil
}

// awaitConnectors waits until every connector of D's worker in work and
// its task are RUNNING (run.sh wait), once run.sh has written the JVM's
// pid there, which run.sh wait takes for the worker's.
func (b *bench) awaitConnectors(ctx context.Context, g *group, work string) error {
	for {
		if _, err := os.Stat(filepath.Join(work, "connect.pid")); err == nil {
			break
		}
		if err := g.exited(); err != nil {
			return err
		}
		if err := sleep(ctx, pollEvery); err != nil {
			return err
		}
	}
	out, err := exec.CommandContext(ctx, b.o.debezium, "wait", work, fmt.Sprint(int(streamLimit.Seconds()))).CombinedOutput()
	if err != nil {
		if log, lerr := os.ReadFile(filepath.Join(work, "connect.log")); lerr == nil {
			out = append(out, tail(log, 40)...)
		}
		return fmt.Errorf("%s: waiting for the connectors: %w\n%s", g.name, err, out)
	}
	return nil
}

// debeziumVersions are the Debezium and Kafka Connect versions run.sh
// fetches, from the pom.xml beside it.
func debeziumVersions(runSh string) string {
	pom, err := os.ReadFile(filepath.Join(filepath.Dir(runSh), "pom.xml"))
	if err != nil {
		return "(versions unknown: " + err.Error() + ")"
	}
	version := func(name string) string {
		if m := regexp.MustCompile(`<` + regexp.QuoteMeta(name) + `>([^<]+)<`).FindSubmatch(pom); m != nil {
			return string(m[1])
		}
		return "?"
	}
	return fmt.Sprintf("Debezium %s on Kafka Connect %s", version("debezium.version"), version("kafka.version"))
}

// tail is b's last n lines.
func tail(b []byte, n int) []byte {
	lines := strings.SplitAfter(string(b), "\n")
	return []byte(strings.Join(lines[max(0, len(lines)-n):], ""))
}
