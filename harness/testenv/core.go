package testenv

import (
	"net/url"
	"os"
	"strconv"
	"testing"
)

// envPGVersion names the PostgreSQL version the test bed runs
// OUTBOXD_TEST_DATABASE_URL under: the test bed exports the first of its
// versions, and make test's per-version runs each version in turn.
const envPGVersion = "OUTBOXD_PG_VERSION"

// Core marks t as a core integration test: one whose outcome depends on
// the PostgreSQL server's version, run again against every version of the
// test bed (make test). Call it first, after t.Parallel. The mark is the
// call itself: harness/testbed/corenames finds the tests whose body calls
// Core in the packages the Makefile's CORE_PKGS lists and hands their names
// to make test, so a new core test cannot be left out of the other
// versions' runs.
//
// It logs which server the test runs against, so that a failure on one
// version says which: the version and the database's host and port, never
// its credentials. It does not skip: the test's own use of the servers
// does that when they are missing.
func Core(t *testing.T) {
	t.Helper()
	t.Log(coreLine(os.Getenv(envPGVersion), os.Getenv(envDatabaseURL)))
}

// coreLine is what Core logs for the version and database URL the
// environment gives: of the URL only its host and port, as the password
// may be in it.
func coreLine(version, databaseURL string) string {
	if version == "" {
		version = "unknown (" + envPGVersion + " is not set)"
	}
	server := envDatabaseURL + " is not set"
	if databaseURL != "" {
		server = envDatabaseURL + " does not parse"
		if u, err := url.Parse(databaseURL); err == nil {
			server = envDatabaseURL + " at " + u.Host
		}
	}
	return "core integration test: PostgreSQL " + version + ", " + server
}

// PGVersion is the major version of PostgreSQL the test bed runs the
// tests under (OUTBOXD_PG_VERSION), 0 when not known: the version a
// cluster the test starts of its own (StartPostgres) has.
func PGVersion(t testing.TB) int {
	t.Helper()
	v, _ := strconv.Atoi(os.Getenv(envPGVersion))
	return v
}
