package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/internal/config"
)

func TestHelpDocumentsEveryFlagWithDefaultAndEnv(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "migrate", "demo"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			if code := run([]string{cmd, "--help"}, &stdout, &stderr, func(string) string { return "" }); code != exitOK {
				t.Fatalf("%s --help exited %d", cmd, code)
			}
			help := stderr.String()
			runCfg := config.Default()
			runFS := runFlags(&runCfg, io.Discard)
			flags := map[string][]string{"run": registered(runFS), "migrate": {"database-url", "table", "slot"}, "demo": {"writers", "events"}}[cmd]
			for _, f := range flags {
				if !strings.Contains(help, "--"+f+"  (env "+config.EnvName(f)+", default ") {
					t.Errorf("%s --help does not document --%s with its env and default:\n%s", cmd, f, help)
				}
			}
		})
	}
}

func TestRunValidationReportsEveryProblem(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "--max-in-flight-records", "0", "--log-format", "xml"}, &stdout, &stderr, func(string) string { return "" })
	if code != exitUsage {
		t.Fatalf("exit code %d, want %d", code, exitUsage)
	}
	for _, want := range []string{"--database-url", "--brokers", "--max-in-flight-records", "--log-format"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("validation output lacks %s:\n%s", want, stderr.String())
		}
	}
}

func TestEnvironmentVariablesSetFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOXD_BROKERS": "no-colon", "OUTBOXD_DATABASE_URL": "postgres://u:secret@h/db"}
	var stdout, stderr bytes.Buffer
	code := run([]string{"run"}, &stdout, &stderr, func(k string) string { return env[k] })
	if code != exitUsage {
		t.Fatalf("exit code %d, want %d", code, exitUsage)
	}
	out := stderr.String()
	if !strings.Contains(out, `"no-colon" is not HOST:PORT`) || strings.Contains(out, "--database-url") {
		t.Errorf("env values not applied as flags:\n%s", out)
	}
	if strings.Contains(out, "secret") {
		t.Errorf("output shows the password:\n%s", out)
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"publish"}, &stdout, &stderr, func(string) string { return "" }); code != exitUsage {
		t.Fatalf("exit code %d, want %d", code, exitUsage)
	}
}

// binary builds outboxd once per test binary run.
var builtBinary string

func TestMain(m *testing.M) {
	binary, remove, err := testbed.BuildOutboxd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	builtBinary = binary
	code := m.Run()
	remove()
	os.Exit(code)
}
