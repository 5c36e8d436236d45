package main

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"testing"
)

const referencePath = "../../docs/configuration.md"

// TestConfigurationReferenceIsCurrent fails when docs/configuration.md no
// longer says what `outboxd help config` prints: a flag was added, renamed,
// re-explained or given another default without regenerating the page.
func TestConfigurationReferenceIsCurrent(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"help", "config"}, &stdout, &stderr, func(string) string { return "" }); code != exitOK {
		t.Fatalf("outboxd help config exited %d: %s", code, stderr.String())
	}
	page, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("reading the configuration reference (create it with `%s`): %v", regenerateReference, err)
	}
	if !bytes.Equal(page, stdout.Bytes()) {
		t.Errorf("docs/configuration.md is stale: run `%s` and commit it (first difference at line %d)", regenerateReference, firstDifferentLine(page, stdout.Bytes()))
	}
}

// TestReferenceHasEveryCommand fails when a command of the usage text is
// missing from the configuration reference.
func TestReferenceHasEveryCommand(t *testing.T) {
	t.Parallel()
	var documented []string
	for _, c := range commands() {
		documented = append(documented, c.Name)
	}
	for _, m := range regexp.MustCompile(`(?m)^  outboxd ([a-z-]+)`).FindAllStringSubmatch(usage, -1) {
		name := m[1]
		if name == "version" || name == "help" {
			continue // no flags
		}
		if !slices.Contains(documented, name) {
			t.Errorf("outboxd %s is in the usage text but not in the configuration reference (commands in main.go)", name)
		}
	}
}

// firstDifferentLine is the 1-based line at which a and b first differ.
func firstDifferentLine(a, b []byte) int {
	al, bl := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := range min(len(al), len(bl)) {
		if !bytes.Equal(al[i], bl[i]) {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}
