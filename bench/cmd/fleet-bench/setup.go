package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/bench/internal/servers"
	"github.com/outboxd/outboxd/bench/internal/steady"
)

// bench is the run's servers, flags and pipelines.
type bench struct {
	*servers.Servers
	o     options
	log   *slog.Logger
	fleet []pipeline // A's and B's
	ref   pipeline   // the single pipeline of the load's reference
	file  string     // A's pipelines file
	// peers are C's pipelines, dbz the same databases as Debezium's
	// connectors (D) stream them, and peersFile C's pipelines file; none
	// without -debezium.
	peers, dbz []pipeline
	peersFile  string
	// nextPort is where the next --metrics-addr is looked for
	// (servers.FreeAddrFrom); 0 before the first.
	nextPort int
}

// pipeline is one pipeline: its database, slot and topic, named after it.
type pipeline struct {
	name, db, slot, topic string
	// insert is one transaction of the steady load into its outbox table
	// (steady.Target.Insert).
	insert string
}

func newPipeline(name string, txSize int) pipeline {
	return pipeline{name: name, db: "fleet_" + name, slot: "fleet_" + name, topic: "fleet." + name, insert: steady.OutboxInsert(txSize)}
}

// fleetPipelines are <prefix>001 to <prefix>NNN.
func fleetPipelines(prefix string, n, txSize int) []pipeline {
	ps := make([]pipeline, n)
	for i := range ps {
		ps[i] = newPipeline(fmt.Sprintf("%s%03d", prefix, i+1), txSize)
	}
	return ps
}

// serverLimits are the PostgreSQL settings the fleet needs above the test
// bed's (max_replication_slots and max_wal_senders 40, max_connections
// 300): a slot and a walsender for each pipeline and the reference, with
// headroom for walsenders that linger after a stop; connections for each
// pipeline's WAL checks and the writers of the load, a connection each,
// beside the walsenders.
func serverLimits(pipelines int) []string {
	replication := max(40, pipelines+20)
	return []string{
		"max_replication_slots = " + strconv.Itoa(replication),
		"max_wal_senders = " + strconv.Itoa(replication),
		"max_connections = " + strconv.Itoa(max(300, 3*pipelines+100)),
	}
}

// shared are the settings of every pipeline beside its own database and
// slot: the top level of A's file, and flags of every B process and the
// reference.
func (b *bench) shared() [][2]string {
	return [][2]string{{"brokers", b.Kafka.Addr}, {"log-level", "warn"}}
}

// own are a pipeline's own settings.
func (b *bench) own(p pipeline) [][2]string {
	return [][2]string{{"database-url", b.DatabaseURL(p.db)}, {"slot", p.slot}}
}

// runFlags are `outboxd run`'s flags for p alone: the same settings A's
// file gives it.
func (b *bench) runFlags(p pipeline) []string {
	args := []string{"run"}
	for _, kv := range append(b.shared(), b.own(p)...) {
		args = append(args, "--"+kv[0], kv[1])
	}
	return args
}

// pipelinesFile is the file of one process running ps, A's or C's
// (docs/pipelines-file.md): the shared settings at the top level, each
// pipeline's own in its entry; every value a double-quoted YAML string.
func (b *bench) pipelinesFile(ps []pipeline) string {
	var f strings.Builder
	entry := func(indent string, kvs [][2]string) {
		for _, kv := range kvs {
			v, _ := json.Marshal(kv[1]) // a JSON string is a YAML one
			fmt.Fprintf(&f, "%s%s: %s\n", indent, kv[0], v)
		}
	}
	entry("", b.shared())
	f.WriteString("pipelines:\n")
	for _, p := range ps {
		fmt.Fprintf(&f, "  - name: %s\n", p.name)
		entry("    ", b.own(p))
	}
	return f.String()
}

// setUp creates every pipeline's database and topic, writes A's and C's
// files into dir and migrates each database with outboxd migrate (A's and
// C's with migrate --config, the reference's with its flags): the outbox
// table, the publication and the slot. C's databases also get Debezium's
// (setUpDebezium).
func (b *bench) setUp(ctx context.Context, dir string) error {
	all := slices.Concat([]pipeline{b.ref}, b.fleet, b.peers, b.dbz)
	var dbs, topics []string
	for _, p := range all {
		if !slices.Contains(dbs, p.db) { // D's databases are C's
			if err := b.Exec(ctx, "postgres", "CREATE DATABASE "+p.db); err != nil {
				return fmt.Errorf("creating database %s: %w", p.db, err)
			}
			dbs = append(dbs, p.db)
		}
		topics = append(topics, p.topic)
	}
	if err := b.CreateTopics(ctx, topics...); err != nil {
		return fmt.Errorf("creating the pipelines' topics: %w", err)
	}
	b.file = filepath.Join(dir, "pipelines.yaml")
	if err := b.writeAndMigrate(ctx, b.file, b.fleet); err != nil {
		return err
	}
	if err := b.migrate(ctx, "--database-url", b.DatabaseURL(b.ref.db), "--slot", b.ref.slot); err != nil {
		return err
	}
	if len(b.peers) == 0 {
		return nil
	}
	b.peersFile = filepath.Join(dir, "peers.yaml")
	if err := b.writeAndMigrate(ctx, b.peersFile, b.peers); err != nil {
		return err
	}
	return b.setUpDebezium(ctx)
}

// writeAndMigrate writes the pipelines file of ps to file and migrates
// their databases with it.
func (b *bench) writeAndMigrate(ctx context.Context, file string, ps []pipeline) error {
	if err := os.WriteFile(file, []byte(b.pipelinesFile(ps)), 0o600); err != nil {
		return fmt.Errorf("writing the pipelines file: %w", err)
	}
	return b.migrate(ctx, "--config", file)
}

func (b *bench) migrate(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, b.o.outboxd, append([]string{"migrate", "--log-level", "warn"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("outboxd migrate %s: %w\n%s", strings.Join(args[:2], " "), err, out)
	}
	return nil
}
