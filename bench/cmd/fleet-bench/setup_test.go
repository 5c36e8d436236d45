package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/bench/internal/servers"
	"github.com/outboxd/outboxd/harness/testbed"
)

func fakeBench(n int) *bench {
	return &bench{
		Servers: &servers.Servers{PG: &testbed.Postgres{URL: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"}, Kafka: &testbed.Kafka{Addr: "127.0.0.1:9092"}},
		fleet:   fleetPipelines("p", n, 10), ref: newPipeline("single", 10),
	}
}

// The pipelines file A runs is one outboxd reads as meant: every pipeline
// with its own database and slot (outboxd validate, which connects to
// nothing).
func TestPipelinesFileIsWhatOutboxdReads(t *testing.T) {
	if testing.Short() {
		t.Skip("builds outboxd")
	}
	bin, remove, err := testbed.BuildOutboxd()
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	b := fakeBench(3)
	file := filepath.Join(t.TempDir(), "pipelines.yaml")
	if err := os.WriteFile(file, []byte(b.pipelinesFile(b.fleet)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "validate", "--config", file).CombinedOutput()
	if err != nil {
		t.Fatalf("outboxd validate: %v\n%s\nfile:\n%s", err, out, b.pipelinesFile(b.fleet))
	}
	for _, p := range b.fleet {
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == p.name {
				line = l
			}
		}
		if !strings.Contains(line, "database="+p.db) || !strings.Contains(line, p.slot) {
			t.Errorf("pipeline %s: validate says %q, want database %s and slot %s\n%s", p.name, line, p.db, p.slot, out)
		}
	}
}

// Each B process gets, as flags, the settings A's file gives its pipeline.
func TestRunFlagsAreTheFilesSettings(t *testing.T) {
	b := fakeBench(2)
	got := strings.Join(b.runFlags(b.fleet[1]), " ")
	want := "run --brokers 127.0.0.1:9092 --log-level warn --database-url postgres://postgres@127.0.0.1:5432/fleet_p002?sslmode=disable --slot fleet_p002"
	if got != want {
		t.Errorf("runFlags = %s\nwant       %s", got, want)
	}
	for _, kv := range append(b.shared(), b.own(b.fleet[1])...) {
		if !strings.Contains(b.pipelinesFile(b.fleet), kv[0]+`: "`+kv[1]+`"`) {
			t.Errorf("the file lacks %s: %q:\n%s", kv[0], kv[1], b.pipelinesFile(b.fleet))
		}
	}
}

// The server's limits grow with the pipelines and never fall below the
// test bed's.
func TestServerLimits(t *testing.T) {
	for n, want := range map[int]string{
		10:  "max_replication_slots = 40, max_wal_senders = 40, max_connections = 300",
		100: "max_replication_slots = 120, max_wal_senders = 120, max_connections = 400",
	} {
		if got := strings.Join(serverLimits(n), ", "); got != want {
			t.Errorf("serverLimits(%d) = %s, want %s", n, got, want)
		}
	}
}
