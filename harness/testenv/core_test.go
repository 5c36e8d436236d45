package testenv

import (
	"strings"
	"testing"
)

// What Core logs names the version and the server, never the password of
// the database URL, whatever the environment holds.
func TestCoreLine(t *testing.T) {
	cases := []struct {
		name, version, url string
		want               string
	}{
		{"the test bed's", "16", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL 16, OUTBOXD_TEST_DATABASE_URL at 127.0.0.1:5432"},
		{"a password", "17", "postgres://app:secret@db.example:6432/app", "PostgreSQL 17, OUTBOXD_TEST_DATABASE_URL at db.example:6432"},
		{"a URL that does not parse", "18", "postgres://app:se cret\x7f@db/app", "OUTBOXD_TEST_DATABASE_URL does not parse"},
		{"no version", "", "postgres://postgres@127.0.0.1:5432/postgres", "PostgreSQL unknown (OUTBOXD_PG_VERSION is not set)"},
		{"no URL", "15", "", "OUTBOXD_TEST_DATABASE_URL is not set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := coreLine(tc.version, tc.url)
			if !strings.Contains(got, tc.want) || strings.Contains(got, "secret") || strings.Contains(got, "cret") {
				t.Errorf("coreLine(%q, %q) = %q, want it to contain %q and no password", tc.version, tc.url, got, tc.want)
			}
		})
	}
}
