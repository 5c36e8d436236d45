package testenv

import (
	"context"
	"testing"

	"github.com/outboxd/outboxd/harness/testbed"
)

// Kafka is a broker of the test's own, started through the test bed script
// in a temporary directory, so the test may stop and restart it without
// disturbing tests running in parallel. It is stopped at cleanup.
type Kafka struct {
	k *testbed.Kafka
	// Addr is the broker's address; it stays the same across Stop and Start.
	Addr string
}

// StartKafka starts a private single-node broker (a few seconds with the jar
// cache warm).
func StartKafka(t testing.TB) *Kafka {
	t.Helper()
	k, err := testbed.StartKafka(context.Background(), require(t, envTestbed), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background()) })
	return &Kafka{k: k, Addr: k.Addr}
}

// Stop stops the broker (SIGTERM, SIGKILL after 20 s).
func (k *Kafka) Stop(t testing.TB) {
	t.Helper()
	if err := k.k.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Start starts the stopped broker again on the same address with its data.
func (k *Kafka) Start(t testing.TB) {
	t.Helper()
	if err := k.k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// StartPostgres starts a PostgreSQL cluster of the test's own
// (wal_level=logical), removed at cleanup, and returns its superuser URL.
func StartPostgres(t testing.TB) *testbed.Postgres {
	t.Helper()
	return StartPostgresOnPort(t, 0)
}

// StartPostgresOnPort is StartPostgres on a given port (0: a free one).
func StartPostgresOnPort(t testing.TB, port int) *testbed.Postgres {
	t.Helper()
	p, err := testbed.StartPostgresOnPort(context.Background(), require(t, envTestbed), port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove(context.Background()) })
	return p
}

// Script returns the test bed script's path (skipping or failing the test
// when it is not set, like every server requirement here).
func Script(t testing.TB) string {
	t.Helper()
	return require(t, envTestbed)
}

// StartStandby starts a streaming physical standby of p (without p's
// replication slots, as a base backup is), removed at cleanup.
func StartStandby(t testing.TB, p *testbed.Postgres) *testbed.Postgres {
	t.Helper()
	s, err := p.StartStandby(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Remove(context.Background()) })
	return s
}

// StartRegistry starts a schema registry of the test's own (Apicurio
// Registry, in memory), stopped at cleanup, and returns the base URL of
// its Confluent-compatible API.
func StartRegistry(t testing.TB) string {
	t.Helper()
	r, err := testbed.StartRegistry(context.Background(), require(t, envTestbed), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r.URL
}

// SchemaCheck returns the python that runs harness/schemacheck/decode.py
// with its independent decoders installed.
func SchemaCheck(t testing.TB) string {
	t.Helper()
	py, err := testbed.SchemaCheck(context.Background(), require(t, envTestbed))
	if err != nil {
		t.Fatal(err)
	}
	return py
}
