// Package pgtemp runs a throwaway PostgreSQL cluster from the local server
// binaries (Debian's /usr/lib/postgresql/<version>/bin) for `outboxd demo`:
// initdb into a temporary directory, wal_level=logical, trust auth on
// loopback, a free port. initdb and postgres refuse to run as root, so under
// root they run as the postgres OS user. Stop removes everything.
package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// Cluster is a running throwaway cluster.
type Cluster struct {
	// URL is a superuser URL of its postgres database.
	URL  string
	dir  string
	bin  string
	cred *syscall.Credential
}

// BinDir finds the server binaries, newest version first.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries under /usr/lib/postgresql (install the Debian package postgresql)")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start creates and starts a cluster.
func Start(ctx context.Context) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL must run as the postgres OS user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if c.dir, err = os.MkdirTemp("", "outboxd-demo-pg-"); err != nil {
		return nil, err
	}
	if err := c.setup(ctx); err != nil {
		_ = os.RemoveAll(c.dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) setup(ctx context.Context) error {
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return err
	}
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(c.dir, "data")
	if out, err := c.command(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s -c wal_level=logical -c max_replication_slots=10 -c max_wal_senders=10 -c fsync=off", port, c.dir)
	if out, err := c.command(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(c.dir, "server.log"), "-o", opts, "-w", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("starting PostgreSQL: %w\n%s%s", err, out, log)
	}
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return nil
}

// Stop shuts the cluster down and removes its directory.
func (c *Cluster) Stop(ctx context.Context) error {
	out, err := c.command(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "fast", "-w", "stop").CombinedOutput()
	if err != nil {
		err = fmt.Errorf("stopping PostgreSQL: %w\n%s", err, out)
	}
	return errors.Join(err, os.RemoveAll(c.dir))
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	// Not in our process group: a Ctrl-C in the terminal must not kill the
	// server before the demo has stopped it cleanly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	return cmd
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
