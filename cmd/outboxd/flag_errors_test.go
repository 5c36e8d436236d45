package main

import (
	"bytes"
	"strings"
	"testing"
)

// Regression (issue 37): an unknown flag's one-line error came first and
// then the whole help, 150 lines of it, so the line that said what was
// wrong scrolled away. A mistake gets its line and a pointer to --help.
func TestFlagMistakeIsItsLineNotTheHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"run", "--max-in-flight-records", "abc"}, `invalid value "abc" for flag -max-in-flight-records`},
		{[]string{"migrate", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"status", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr, func(string) string { return "" }); code != exitUsage {
			t.Errorf("%v: exit code %d, want %d", tc.args, code, exitUsage)
		}
		out := stderr.String()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], tc.want) || !strings.Contains(lines[1], `"outboxd `+tc.args[0]+` --help"`) {
			t.Errorf("%v printed %d lines, want the error and a pointer to --help:\n%s", tc.args, len(lines), out)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"run", "--help"}, &stdout, &stderr, func(string) string { return "" }); code != exitOK ||
		!strings.Contains(stderr.String(), "--database-url") {
		t.Errorf("run --help: exit %d, want 0 and the flags:\n%s", code, stderr.String())
	}
}
