package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildOutboxd builds the outboxd command into a temporary directory, for
// tests that run it as a child process; remove deletes the directory.
func BuildOutboxd() (binary string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "outboxd-bin-")
	if err != nil {
		return "", nil, err
	}
	binary = filepath.Join(dir, "outboxd")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/outboxd/outboxd/cmd/outboxd").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building outboxd: %w\n%s", err, out)
	}
	return binary, func() { _ = os.RemoveAll(dir) }, nil
}
