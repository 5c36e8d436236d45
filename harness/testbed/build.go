package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildOutboxd builds the outboxd command into a temporary directory, for
// tests that run it as a child process; remove deletes the directory.
func BuildOutboxd() (binary string, remove func(), err error) {
	return build(nil)
}

// BuildStaticOutboxd builds outboxd as a container image carries it:
// statically linked (CGO_ENABLED=0), stripped, stamped with version.
func BuildStaticOutboxd(version string) (binary string, remove func(), err error) {
	return build([]string{"CGO_ENABLED=0"}, "-trimpath", "-ldflags", "-s -w -X main.version="+version)
}

// build builds outboxd in the product module's own directory, with its own
// go.mod, also when the caller is a module of its own beside it (deploy/),
// whose dependency versions may be newer: the binary is the one users
// build.
func build(env []string, flags ...string) (binary string, remove func(), err error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/outboxd/outboxd").Output()
	if err != nil {
		return "", nil, fmt.Errorf("finding outboxd's module: %w", err)
	}
	dir, err := os.MkdirTemp("", "outboxd-bin-")
	if err != nil {
		return "", nil, err
	}
	binary = filepath.Join(dir, "outboxd")
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", binary, "./cmd/outboxd")...)
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building outboxd: %w\n%s", err, out)
	}
	return binary, func() { _ = os.RemoveAll(dir) }, nil
}
