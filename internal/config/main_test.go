package config

import (
	"os"
	"testing"

	"github.com/outboxd/outboxd/lib/rawio"
)

// TestMain runs the tests with raw I/O on whatever the caller's
// environment says: the command's defaults and checks follow the switch,
// and the tests that are about it (TestReadLingerNeedsRawIO) set it
// themselves.
func TestMain(m *testing.M) {
	os.Unsetenv(rawio.EnvVar)
	os.Exit(m.Run())
}
