package cdc_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/harness/testenv"
)

// Regression (issue 37): the position a process carried over from an
// earlier session was trusted after the server's storage was rolled back
// (a restore of a copy of its data directory: same system identifier,
// same timeline). The next session started replication past the server's
// WAL end, and the commits the server then wrote below that position were
// skipped: lost. A carried position past the WAL end is not trusted.
func TestRolledBackStorageDoesNotSkipNewCommits(t *testing.T) {
	t.Parallel()
	for _, stop := range []bool{false, true} {
		name := "at-least-once"
		if stop {
			name = "exactly-once stops" // StopOnServerChange: its progress topic holds the lost history
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rollBackUnderAStreamer(t, stop)
		})
	}
}

func rollBackUnderAStreamer(t *testing.T, stop bool) {
	pg := testenv.StartPostgres(t)
	b := newBed(t, pg.URL, nil)
	ctx := t.Context()
	data := filepath.Join(pg.Dir, "data")
	backup := filepath.Join(t.TempDir(), "data")

	// A cold copy of the cluster, with the bed's database and slot in it.
	b.pool.Close()
	if err := pg.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", data, backup).CombinedOutput(); err != nil {
		t.Fatalf("copying the data directory: %v\n%s", err, out)
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	b.pool = pool
	// Push the WAL well past the copy's end, and have it all confirmed.
	if _, err := b.pool.Exec(ctx, `INSERT INTO other (note) SELECT repeat('x', 400) FROM generate_series(1, 100000)`); err != nil {
		t.Fatal(err)
	}
	r := b.start(cdc.Config{StopOnServerChange: stop})
	ids, err := b.insert(ctx, []row{{agg: uuidFor(1), topic: b.topic, payload: `{"before": "rollback"}`}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	c := b.consume()
	c.untilIDs(t, ids, time.Minute)
	high := b.currentLSN(t)
	testenv.Eventually(t, time.Minute, "the WAL confirmed", func() bool { return r.st.Stats().ConfirmedLSN >= high })

	// Roll the storage back to the copy, the streamer still running.
	b.pool.Close()
	if err := pg.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "sh", "-c", `rm -rf "$1" && cp -a "$2" "$1"`, "sh", data, backup).CombinedOutput(); err != nil {
		t.Fatalf("restoring the copy: %v\n%s", err, out)
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if b.pool, err = pgxpool.New(ctx, b.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.pool.Close)
	if cur := b.currentLSN(t); cur >= high {
		t.Fatalf("the restored server's WAL (%s) is not below what was confirmed (%s): the test would not test anything", cur, high)
	}
	if stop {
		err := r.wait(2 * time.Minute)
		if !cdc.IsPermanent(err) || !strings.Contains(err.Error(), "rolled back") {
			t.Fatalf("Run on the rolled-back server = %v, want a permanent stop saying its storage was rolled back", err)
		}
		return
	}
	// A commit the rolled-back server writes below the carried position
	// (an id of its own: the sequence was rolled back too).
	const after = 999999
	if _, err := b.pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, topic, payload) VALUES ($1, $2, $3, '{"after": "rollback"}')`,
		after, uuidFor(2), b.topic); err != nil {
		t.Fatal(err)
	}
	c.untilIDs(t, []int64{after}, 2*time.Minute)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}
