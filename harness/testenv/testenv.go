// Package testenv hands tests the project's real servers: each test gets a
// database of its own (a fresh CREATE DATABASE, dropped with its replication
// slots afterwards) and topic names of its own, so tests run in parallel.
//
// The servers come from the environment that internal/testbed/testbed.sh
// exports (make test, make up):
//
//	OUTBOXD_TEST_DATABASE_URL  a superuser URL of a PostgreSQL with wal_level=logical
//	OUTBOXD_TEST_BROKERS       comma-separated Kafka bootstrap addresses
//	OUTBOXD_TESTBED            the test bed script, for tests that start servers of their own
//	OUTBOXD_PG_VERSION         the version of that PostgreSQL, which Core logs
//
// When a variable is missing, a test that needs it is skipped with a message
// saying how to provide it; under CI=true it fails instead, so that a CI run
// that skipped its integration tests cannot look green.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testbed"
)

const (
	envDatabaseURL = "OUTBOXD_TEST_DATABASE_URL"
	envBrokers     = "OUTBOXD_TEST_BROKERS"
	envTestbed     = testbed.ScriptEnv
)

// require returns the value of the environment variable or ends the test:
// skipped on a developer machine, failed under CI.
func require(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	msg := fmt.Sprintf("%s is not set: run `make test`, or `make up` and `eval \"$(make -s env)\"`, or point it at your own server", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: integration tests must not be skipped)")
	}
	t.Skip(msg)
	return ""
}

// Name returns a lower-case identifier unique to this test and call, usable
// as a database, slot, publication or topic name: prefix, a sanitized test
// name and a random suffix, at most 63 bytes.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	base := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if max := 63 - len(prefix) - 2 - 8; len(base) > max {
		base = base[len(base)-max:]
	}
	return prefix + "_" + base + "_" + hex.EncodeToString(b[:])
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// AdminURL returns the superuser URL of the test PostgreSQL (its postgres database).
func AdminURL(t testing.TB) string {
	t.Helper()
	return require(t, envDatabaseURL)
}

// Database creates a fresh database for this test and returns its URL. At
// cleanup, the replication slots on it are dropped (their walsenders
// terminated first) and the database is dropped.
func Database(t testing.TB) string {
	t.Helper()
	return database(t, AdminURL(t))
}

func database(t testing.TB, admin string) string {
	t.Helper()
	name := Name(t, "t")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connecting to the test PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(t, admin, name) })
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parsing %s: %v", envDatabaseURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

func dropDatabase(t testing.TB, admin, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Errorf("cleanup: connecting to drop database %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	// A slot keeps its database alive; an active one must lose its walsender first.
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		}
		if err == nil || attempt == 20 {
			break
		}
		time.Sleep(250 * time.Millisecond) // the terminated walsender is still releasing its slot
	}
	if err != nil {
		t.Errorf("cleanup: dropping replication slots of %s: %v", name, err)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("cleanup: dropping database %s: %v", name, err)
	}
}

// Brokers returns the test Kafka's bootstrap addresses.
func Brokers(t testing.TB) []string {
	t.Helper()
	return strings.Split(require(t, envBrokers), ",")
}

// Topic creates a topic unique to this test with the given partition count
// on the test Kafka and returns its name; it is deleted at cleanup.
func Topic(t testing.TB, partitions int32) string {
	t.Helper()
	return CreateTopic(t, Brokers(t), Name(t, "topic"), partitions)
}

// CreateTopic creates the named topic on the given brokers and deletes it at cleanup.
func CreateTopic(t testing.TB, brokers []string, name string, partitions int32) string {
	t.Helper()
	return CreateTopicWithConfig(t, brokers, name, partitions, nil)
}

// CreateTopicWithConfig is CreateTopic with topic configs (e.g.
// max.message.bytes).
func CreateTopicWithConfig(t testing.TB, brokers []string, name string, partitions int32, configs map[string]*string) string {
	t.Helper()
	adm := Admin(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating topic %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Best effort: a test that stopped its broker has nothing to delete from.
		_, _ = adm.DeleteTopics(ctx, name)
	})
	return name
}

// Admin returns a kadm client for the brokers, closed at cleanup.
func Admin(t testing.TB, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("creating Kafka admin client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// DatabaseOn is Database on another server (a private cluster from
// StartPostgres), given its superuser URL.
func DatabaseOn(t testing.TB, adminURL string) string {
	t.Helper()
	return database(t, adminURL)
}

// Eventually retries cond every 100ms until it holds, failing the test
// with what after d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
