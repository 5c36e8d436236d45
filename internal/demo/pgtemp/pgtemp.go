// Package pgtemp runs a throwaway PostgreSQL cluster for `outboxd demo`:
// initdb into a temporary directory, wal_level=logical, reachable only
// through a Unix socket in that directory (mode 0700: only this OS user,
// the cluster's and root can connect; no TCP port, so no other local user
// gets the trusted superuser). It owns finding the server binaries for it: the
// local ones (Debian's /usr/lib/postgresql/<version>/bin) when present,
// otherwise the zonky embedded-postgres binaries from Maven Central,
// downloaded once into a cache (fetch.go). initdb and postgres refuse to run
// as root, so under root they run as the postgres OS user (nobody where there
// is none). Stop removes everything but the cache.
package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// debianRoot is where Debian's postgresql packages put the server binaries.
const debianRoot = "/usr/lib/postgresql/*/bin"

// Options says where the server binaries come from.
type Options struct {
	// LocalRoots are glob patterns of local server binary directories, each
	// ending in <major version>/bin; nil means Debian's
	// /usr/lib/postgresql/*/bin. The newest version found is used.
	LocalRoots []string
	// CacheDir keeps the downloaded binaries when there are no local ones;
	// "" means DefaultCacheDir().
	CacheDir string
	// RunAs is the OS user PostgreSQL runs as when this process is root;
	// "" means postgres, or nobody where there is no postgres user.
	RunAs string
	// Progress gets a line when a download starts and when it is done; nil
	// discards them.
	Progress io.Writer
}

// Cluster is a running throwaway cluster.
type Cluster struct {
	// URL is a superuser URL of its postgres database.
	URL  string
	dir  string
	bin  string
	cred *syscall.Credential
}

// BinDir finds the local server binaries under /usr/lib/postgresql, newest
// version first. It never downloads.
func BinDir() (string, error) {
	return localBinDir([]string{debianRoot})
}

func localBinDir(roots []string) (string, error) {
	var dirs []string
	for _, r := range roots {
		m, err := filepath.Glob(r)
		if err != nil {
			return "", fmt.Errorf("looking for PostgreSQL server binaries in %s: %w", r, err)
		}
		dirs = append(dirs, m...)
	}
	sort.SliceStable(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries in %q (install the Debian package postgresql)", roots)
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// binDir is the local binaries when there are any, else the cached
// download, fetched first if need be.
func (o Options) binDir(ctx context.Context) (string, error) {
	roots := o.LocalRoots
	if roots == nil {
		roots = []string{debianRoot}
	}
	if d, err := localBinDir(roots); err == nil {
		return d, nil
	}
	cache := o.CacheDir
	if cache == "" {
		var err error
		if cache, err = DefaultCacheDir(); err != nil {
			return "", err
		}
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	return fetchBinaries(ctx, cache, progress, os.Geteuid() == 0)
}

// runAs is the credential PostgreSQL runs with: nil unless we are root.
func (o Options) runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	names := []string{o.RunAs}
	if o.RunAs == "" {
		names = []string{"postgres", "nobody"}
	}
	var errs []error
	for _, name := range names {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root, PostgreSQL must run as another OS user: %w", errors.Join(errs...))
}

// Start creates and starts a cluster.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	cred, err := o.runAs()
	if err != nil {
		return nil, err
	}
	bin, err := o.binDir(ctx)
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, cred: cred}
	if c.dir, err = os.MkdirTemp("", "outboxd-demo-pg-"); err != nil {
		return nil, fmt.Errorf("creating the cluster directory: %w", err)
	}
	if err := c.setup(ctx); err != nil {
		_ = os.RemoveAll(c.dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) setup(ctx context.Context) error {
	// The directory holds the socket: private to the cluster's OS user
	// (root passes anyway).
	if err := os.Chmod(c.dir, 0o700); err != nil {
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
	// No TCP: initdb's trust rules would let every local user in as the
	// superuser over loopback. The socket's directory is private.
	opts := fmt.Sprintf("-c listen_addresses='' -c port=%d -c unix_socket_directories=%s -c unix_socket_permissions=0700 -c wal_level=logical -c max_replication_slots=10 -c max_wal_senders=10 -c fsync=off", socketPort, c.dir)
	if out, err := c.command(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(c.dir, "server.log"), "-o", opts, "-w", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("starting PostgreSQL: %w\n%s%s", err, out, log)
	}
	c.URL = fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=%d&sslmode=disable", url.QueryEscape(c.dir), socketPort)
	return nil
}

// socketPort names the socket file (.s.PGSQL.5432); no port is opened.
const socketPort = 5432

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
