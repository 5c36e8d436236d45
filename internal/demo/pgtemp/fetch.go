package pgtemp

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
)

// zonkyVersion is the PostgreSQL release downloaded when there are no local
// server binaries.
const zonkyVersion = embeddedpostgres.V17

// DefaultCacheDir is where downloaded server binaries are kept: under the
// user cache directory, and under root in /var/cache/outboxd, because the
// binaries then run as another OS user, who cannot traverse /root.
func DefaultCacheDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/cache/outboxd/embedded-postgres", nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory: %w", err)
	}
	return filepath.Join(d, "outboxd", "embedded-postgres"), nil
}

// fetchBinaries returns the bin directory of the zonky binaries in cache,
// downloading and unpacking them first if they are not there. shared makes
// everything it creates readable and traversable by other OS users.
//
// github.com/fergusstrange/embedded-postgres downloads, checks and unpacks
// the binaries, but only from inside EmbeddedPostgres.Start, which then runs
// initdb and pg_ctl itself as the current user: under root both refuse, and
// the library cannot run them as another user. So fetchBinaries calls Start
// for the download alone: with a placeholder data directory (PG_VERSION
// only, which Start takes as an initialised cluster to reuse, so it skips
// initdb) whose pg_ctl start then fails. pgtemp runs initdb and pg_ctl
// itself from the unpacked binaries.
//
// Start also leaves a small log file, embedded_postgres_log*, in the
// temporary directory. It cannot be cancelled: when ctx ends first,
// fetchBinaries returns and the download finishes in the background (or
// ends with the process).
func fetchBinaries(ctx context.Context, cache string, progress io.Writer, shared bool) (string, error) {
	dest := unpacked(cache)
	if complete(dest) {
		return filepath.Join(dest, "bin"), nil
	}
	if err := context.Cause(ctx); err != nil {
		return "", fmt.Errorf("fetching PostgreSQL binaries: %w", err)
	}
	if err := mkdirAll(cache, shared); err != nil {
		return "", fmt.Errorf("creating the PostgreSQL binaries cache: %w", err)
	}
	major, _, _ := strings.Cut(string(zonkyVersion), ".")
	// The archive embedded-postgres keeps (named by it) makes it skip the download.
	if archives, _ := filepath.Glob(filepath.Join(cache, "*-"+string(zonkyVersion)+".txz")); len(archives) > 0 {
		fmt.Fprintf(progress, "unpacking PostgreSQL %s server binaries from the archive cached in %s\n", major, cache)
	} else {
		fmt.Fprintf(progress, "fetching PostgreSQL %s server binaries from Maven Central into %s (about 15 MB, once)\n", major, cache)
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- install(cache, dest, shared) }()
	select {
	case err := <-done:
		if err != nil {
			return "", fmt.Errorf("fetching PostgreSQL binaries: %w", err)
		}
	case <-ctx.Done():
		return "", fmt.Errorf("fetching PostgreSQL binaries: %w", context.Cause(ctx))
	}
	fmt.Fprintf(progress, "PostgreSQL %s server binaries ready in %s (%s)\n", zonkyVersion, time.Since(began).Round(100*time.Millisecond), dest)
	return filepath.Join(dest, "bin"), nil
}

// unpacked is where the binaries are unpacked in cache.
func unpacked(cache string) string {
	return filepath.Join(cache, fmt.Sprintf("postgresql-%s-%s-%s", zonkyVersion, runtime.GOOS, runtime.GOARCH))
}

// install has embedded-postgres download (unless its archive is cached
// already) and unpack the binaries into a fresh directory next to dest, and
// renames that to dest once complete: a dest that exists is complete.
func install(cache, dest string, shared bool) error {
	stage, err := os.MkdirTemp(cache, "fetching-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	bins, data := filepath.Join(stage, "pg"), filepath.Join(stage, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	major, _, _ := strings.Cut(string(zonkyVersion), ".")
	if err := os.WriteFile(filepath.Join(data, "PG_VERSION"), []byte(major+"\n"), 0o600); err != nil {
		return err
	}
	port, err := freePort() // Start insists that its port be free
	if err != nil {
		return err
	}
	db := embeddedpostgres.NewDatabase(embeddedpostgres.DefaultConfig().
		Version(zonkyVersion).
		CachePath(cache).
		BinariesPath(bins).
		RuntimePath(filepath.Join(stage, "runtime")).
		DataPath(data).
		Port(uint32(port)).
		Logger(io.Discard))
	switch err := db.Start(); {
	case err == nil: // not expected: nothing in the placeholder to start
		_ = db.Stop()
	case !strings.HasPrefix(err.Error(), "could not start postgres"):
		// Not its pg_ctl start failing (its words in v1.34.0, which
		// TestStartFromDownloadedBinaries holds it to) but the download or
		// the unpacking.
		return err
	}
	if !complete(bins) {
		return fmt.Errorf("unpacked binaries in %s are incomplete", bins)
	}
	if shared {
		if err := shareTree(bins); err != nil {
			return err
		}
	}
	if err := os.Rename(bins, dest); err != nil && !complete(dest) {
		return err
	}
	return nil
}

// complete says whether dir holds what pgtemp runs: initdb, pg_ctl,
// postgres and the pgoutput plugin.
func complete(dir string) bool {
	for _, f := range []string{"bin/initdb", "bin/pg_ctl", "bin/postgres", "lib/postgresql/pgoutput.so"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// mkdirAll is os.MkdirAll, with every directory it creates traversable by
// other users whatever the umask when shared.
func mkdirAll(dir string, shared bool) error {
	if _, err := os.Stat(dir); err == nil || !shared {
		return os.MkdirAll(dir, 0o755)
	}
	if err := mkdirAll(filepath.Dir(dir), shared); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// shareTree makes dir and everything in it readable by other users, and
// directories and executables executable by them, whatever the umask was.
func shareTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm() | 0o044
		if d.IsDir() || mode&0o100 != 0 {
			mode |= 0o011
		}
		return os.Chmod(path, mode)
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
