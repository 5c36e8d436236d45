package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Kafka is a broker of the test's own, started through the test bed script
// in a temporary directory, so the test may stop and restart it without
// disturbing tests running in parallel. It is stopped at cleanup.
type Kafka struct {
	script string
	dir    string
	// Addr is the broker's address; it stays the same across Stop and Start.
	Addr string
}

// StartKafka starts a private single-node broker (a few seconds with the jar
// cache warm).
func StartKafka(t testing.TB) *Kafka {
	t.Helper()
	k := &Kafka{script: require(t, envTestbed), dir: t.TempDir()}
	k.Addr = k.run(t, "kafka-start")
	t.Cleanup(func() { k.run(t, "kafka-stop") })
	return k
}

// Stop stops the broker (SIGTERM, SIGKILL after 20 s).
func (k *Kafka) Stop(t testing.TB) { t.Helper(); k.run(t, "kafka-stop") }

// Start starts the stopped broker again on the same address with its data.
func (k *Kafka) Start(t testing.TB) { t.Helper(); k.run(t, "kafka-start") }

func (k *Kafka) run(t testing.TB, verb string) string {
	t.Helper()
	return runScript(t, k.script, verb, k.dir)
}

// Postgres is a PostgreSQL cluster of the test's own (wal_level=logical),
// which the test may stop and restart. Stopped and removed at cleanup.
type Postgres struct {
	script string
	dir    string
	// URL is a superuser URL of its postgres database.
	URL string
}

// StartPostgres initdbs and starts a private cluster (as the postgres OS
// user when running as root).
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	script := require(t, envTestbed)
	// Not t.TempDir: its parent is private to this user, and under root the
	// server runs as the postgres OS user, which must reach the directory.
	dir, err := os.MkdirTemp("", "outboxd-test-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &Postgres{script: script, dir: dir}
	t.Cleanup(func() {
		runScript(t, p.script, "pg-stop", p.dir, "immediate")
		_ = os.RemoveAll(dir)
	})
	p.URL = p.run(t, "pg-start")
	return p
}

// Stop shuts the cluster down with the given pg_ctl mode (smart, fast, immediate).
func (p *Postgres) Stop(t testing.TB, mode string) {
	t.Helper()
	runScript(t, p.script, "pg-stop", p.dir, mode)
}

// Start starts the stopped cluster again on the same port.
func (p *Postgres) Start(t testing.TB) { t.Helper(); p.run(t, "pg-start") }

func (p *Postgres) run(t testing.TB, verb string) string {
	t.Helper()
	return runScript(t, p.script, verb, p.dir)
}

func runScript(t testing.TB, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command(script, args...).Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}
