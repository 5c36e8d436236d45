package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// MemoryCgroup is a memory cgroup of the test's own with a hard limit: the
// kernel kills a process in it that uses more.
type MemoryCgroup struct {
	dir string
	v2  bool
}

// NewMemoryCgroup makes a memory cgroup limited to limit bytes (cgroup v1
// under /sys/fs/cgroup/memory, or v2 under /sys/fs/cgroup where the
// memory controller is delegated), removed at cleanup. It returns nil
// and why when this machine does not let the test make one (not root, no
// writable hierarchy).
func NewMemoryCgroup(t testing.TB, limit int64) (*MemoryCgroup, error) {
	t.Helper()
	name := Name(t, "outboxd-test")
	var errs []error
	for _, c := range []struct {
		parent, limitFile string
		v2                bool
	}{
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", false},
		{"/sys/fs/cgroup", "memory.max", true},
	} {
		dir := filepath.Join(c.parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, c.limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			_ = os.Remove(dir)
			errs = append(errs, err)
			continue
		}
		if !c.v2 {
			// No swap to spill into: the limit is the memory's.
			_ = os.WriteFile(filepath.Join(dir, "memory.swappiness"), []byte("0"), 0o644)
		}
		g := &MemoryCgroup{dir: dir, v2: c.v2}
		t.Cleanup(func() { _ = os.Remove(dir) })
		return g, nil
	}
	return nil, fmt.Errorf("making a memory cgroup: %w", errors.Join(errs...))
}

// Wrap returns argv running argv[0] in the cgroup: a shell that moves
// itself into it, then execs the program.
func (g *MemoryCgroup) Wrap(argv ...string) []string {
	return append([]string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, g.dir}, argv...)
}

// Killed counts the processes the kernel killed in the cgroup for going
// over its limit (0 where the kernel does not say).
func (g *MemoryCgroup) Killed() int {
	file, key := "memory.oom_control", "oom_kill "
	if g.v2 {
		file, key = "memory.events", "oom_kill "
	}
	b, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
