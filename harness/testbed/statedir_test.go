package testbed

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Regression (issue 37): the test bed kept the state of `up` in one
// directory per user, so `make down` in one clone stopped the servers
// another clone of the same user was testing against. Each checkout has
// its own.
func TestEachCheckoutHasItsOwnTestBed(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	dirs := map[string]bool{}
	for _, clone := range []string{"a", "b"} {
		bin := filepath.Join(t.TempDir(), clone, "harness", "testbed")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"testbed.sh", "kafka-pom.xml"} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(bin, f), b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, override := range []string{"", filepath.Join(home, "mine")} {
			cmd := exec.Command("bash", filepath.Join(bin, "testbed.sh"), "state-dir")
			cmd.Env = append(os.Environ(), "HOME="+home, "OUTBOXD_TESTBED_DIR="+override)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("testbed.sh state-dir: %v", err)
			}
			dir := strings.TrimSpace(string(out))
			switch {
			case override != "" && dir != override:
				t.Errorf("with OUTBOXD_TESTBED_DIR=%s the state is in %s", override, dir)
			case override == "" && !strings.HasPrefix(dir, filepath.Join(home, ".cache", "outboxd")+string(filepath.Separator)):
				t.Errorf("clone %s keeps its state in %s, not under $HOME/.cache/outboxd", clone, dir)
			case override == "":
				dirs[dir] = true
			}
		}
	}
	if len(dirs) != 2 {
		t.Errorf("two clones share the test bed's state: %v", dirs)
	}
}
