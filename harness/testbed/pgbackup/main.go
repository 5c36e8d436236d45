// Command pgbackup makes a physical standby's data directory from a running
// primary on the same machine, for the test bed's pg-standby. It does what
// pg_basebackup -R does, by the low-level backup API instead: the zonky
// server binaries the test bed uses for PostgreSQL 16 to 18 have no
// pg_basebackup, and Debian's (15) refuses a newer server.
//
//	pgbackup -url URL -src PRIMARY_DATA -dst STANDBY_DATA -slot NAME
//
// In order: create the physical slot NAME on the primary (reserving WAL at
// once, so nothing the standby needs is recycled before it connects);
// pg_backup_start; copy the data directory without pg_wal's segments,
// pg_replslot (a base backup carries no replication slot, as in
// production), the postmaster files and the server log; pg_backup_stop,
// whose label file becomes backup_label; then standby.signal and the
// primary_conninfo/primary_slot_name the standby streams with. The standby
// fetches all WAL from the backup's start through the slot.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	url := flag.String("url", "", "superuser URL of the primary")
	src := flag.String("src", "", "the primary's data directory")
	dst := flag.String("dst", "", "the standby's data directory to create")
	slot := flag.String("slot", "", "physical replication slot to create on the primary for the standby")
	flag.Parse()
	if *url == "" || *src == "" || *dst == "" || *slot == "" {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := backup(ctx, *url, *src, *dst, *slot); err != nil {
		fmt.Fprintf(os.Stderr, "pgbackup: %v\n", err)
		os.Exit(1)
	}
}

func backup(ctx context.Context, url, src, dst, slot string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parsing the primary's URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting to the primary: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", slot); err != nil {
		return fmt.Errorf("creating physical slot %s: %w", slot, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_backup_start('outboxd-testbed', true)"); err != nil {
		return fmt.Errorf("starting the backup: %w", err)
	}
	if err := copyDataDir(src, dst); err != nil {
		return err
	}
	var label string
	if err := conn.QueryRow(ctx, "SELECT labelfile FROM pg_backup_stop(false)").Scan(&label); err != nil {
		return fmt.Errorf("stopping the backup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dst, "backup_label"), []byte(label), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dst, "standby.signal"), nil, 0o600); err != nil {
		return err
	}
	// dbname is what slot synchronization (17+) connects with; a physical
	// standby itself ignores it.
	conninfo := fmt.Sprintf("host=%s port=%d user=%s dbname=%s application_name=%s",
		cfg.Host, cfg.Port, cfg.User, cfg.Database, slot)
	auto, err := os.OpenFile(filepath.Join(dst, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(auto, "primary_conninfo = '%s'\nprimary_slot_name = '%s'\n", conninfo, slot)
	return errors.Join(err, auto.Close())
}

// skipped reports whether a path (relative to the data directory) stays out
// of the copy; directories whose contents are skipped are still created.
func skipped(rel string, dir bool) (skip, emptyDir bool) {
	switch {
	case rel == "postmaster.pid", rel == "postmaster.opts", rel == "server.log",
		rel == "backup_label", rel == "tablespace_map", rel == "standby.signal":
		return true, false
	case dir && (rel == "pg_wal" || rel == "pg_replslot" || rel == "pg_stat_tmp"):
		return true, true
	}
	return false, false
}

func copyDataDir(src, dst string) error {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			// A file removed while we walk (a temporary one) is no loss:
			// the WAL from the backup's start replays it.
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if skip, empty := skipped(rel, d.IsDir()); skip {
			if empty {
				if err := os.MkdirAll(target, 0o700); err != nil {
					return err
				}
				if rel == "pg_wal" {
					if err := os.MkdirAll(filepath.Join(target, "archive_status"), 0o700); err != nil {
						return err
					}
				}
				return fs.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		case info.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link (a tablespace?): not supported by the test bed", path)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
