package pgtemp

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestBinDirPrefersLocalBinaries: local binaries win over the cache, the
// newest version first, and neither a local hit nor a cache hit downloads
// anything.
func TestBinDirPrefersLocalBinaries(t *testing.T) {
	local := t.TempDir()
	for _, v := range []string{"15", "16"} {
		touch(t, filepath.Join(local, v, "bin", "initdb"))
	}
	cached := t.TempDir()
	dest := unpacked(cached)
	for _, f := range []string{"bin/initdb", "bin/pg_ctl", "bin/postgres", "lib/postgresql/pgoutput.so"} {
		touch(t, filepath.Join(dest, f))
	}
	for _, tc := range []struct {
		name  string
		roots []string
		cache string
		want  string
	}{
		{"local over cache", []string{filepath.Join(local, "*", "bin")}, cached, filepath.Join(local, "16", "bin")},
		{"local, empty cache", []string{filepath.Join(local, "*", "bin")}, t.TempDir(), filepath.Join(local, "16", "bin")},
		{"no local, cached", []string{filepath.Join(t.TempDir(), "*", "bin")}, cached, filepath.Join(dest, "bin")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var progress bytes.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a download would fail at once
			got, err := Options{LocalRoots: tc.roots, CacheDir: tc.cache, Progress: &progress}.binDir(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("binDir = %s, want %s", got, tc.want)
			}
			if progress.Len() > 0 {
				t.Errorf("a download was announced:\n%s", progress.String())
			}
		})
	}
}

// TestStartUsesLocalBinaries starts a cluster from Debian's binaries where
// they are installed.
func TestStartUsesLocalBinaries(t *testing.T) {
	if _, err := BinDir(); err != nil {
		t.Skip(err)
	}
	c := startAndCheck(t, Options{CacheDir: t.TempDir()})
	if !strings.HasPrefix(c.bin, "/usr/lib/postgresql/") {
		t.Errorf("binaries from %s, want /usr/lib/postgresql/<version>/bin", c.bin)
	}
}

// TestStartFromDownloadedBinaries hides the local binaries: the cluster
// runs from the zonky binaries, downloaded into the default cache on the
// first run. Under root it also runs them as nobody, as on a machine
// without a postgres OS user.
func TestStartFromDownloadedBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("may download PostgreSQL binaries from Maven Central")
	}
	users := []string{""}
	if os.Geteuid() == 0 {
		users = append(users, "nobody")
	}
	for _, u := range users {
		t.Run("runas="+u, func(t *testing.T) {
			var progress bytes.Buffer
			began := time.Now()
			c := startAndCheck(t, Options{LocalRoots: []string{filepath.Join(t.TempDir(), "*", "bin")}, RunAs: u, Progress: &progress})
			t.Logf("started in %s from %s; progress: %q", time.Since(began).Round(time.Millisecond), c.bin, progress.String())
			cache, err := DefaultCacheDir()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(c.bin, cache+string(filepath.Separator)) {
				t.Errorf("binaries from %s, want the cache %s", c.bin, cache)
			}
		})
	}
}

// startAndCheck starts a cluster, checks it can do what the demo needs
// (wal_level=logical, a pgoutput slot), stops it and checks its directory
// is gone.
func startAndCheck(t *testing.T, o Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop(context.Background())
		}
	}()
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Errorf("wal_level = %s, want logical", level)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot('t', 'pgoutput')"); err != nil {
		t.Errorf("creating a pgoutput slot: %v", err)
	}
	// Regression (issue 37): the cluster listened on 127.0.0.1 with
	// initdb's trust rules, so every local user could connect as its
	// superuser. It has no TCP port; its socket's directory is private.
	var listen string
	if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen); err != nil || listen != "" {
		t.Errorf("listen_addresses = %q (%v), want none: no TCP port", listen, err)
	}
	_ = conn.Close(ctx)
	if fi, err := os.Stat(c.dir); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("the socket's directory %s: %v, mode %v; want it private (0700)", c.dir, err, fi.Mode().Perm())
	}
	stopped = true
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("cluster directory %s still there after Stop (stat: %v)", c.dir, err)
	}
	return c
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o755); err != nil {
		t.Fatal(err)
	}
}
