package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
)

// replayOut runs outboxd replay on w's database and brokers with args and
// returns its exit code and output (stdout and stderr).
func (w *world) replayOut(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), builtBinary, append([]string{"replay", "--database-url", w.url, "--brokers", w.brokers}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("outboxd replay: %v", err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// replayed is one record a replay sent.
type replayed struct {
	id             int64
	key, source    string
	replay         string
	partition, off int64
}

// readReplayed reads topic from the start until want records with an id
// header arrived and a quiet second passed, or d passed.
func readReplayed(t *testing.T, brokers, topic string, want int, d time.Duration, opts ...kgo.Opt) []replayed {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []replayed
	deadline, quiet := time.Now().Add(d), time.Time{}
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			rec := replayed{key: string(r.Key), partition: int64(r.Partition), off: r.Offset}
			for _, h := range r.Headers {
				switch h.Key {
				case "id":
					rec.id, _ = strconv.ParseInt(string(h.Value), 10, 64)
				case "outboxd.source":
					rec.source = string(h.Value)
				case "outboxd.replay":
					rec.replay = string(h.Value)
				}
			}
			out = append(out, rec)
		})
		if len(out) >= want {
			if quiet.IsZero() {
				quiet = time.Now().Add(time.Second)
			} else if time.Now().After(quiet) {
				break
			}
		}
	}
	return out
}

// checkReplayed checks that recs hold every id of want once deduplicated
// by source and id (what the idempotent consumer does), nothing else, and
// each key's ids in increasing order (the order they were written in):
// it returns how many records were duplicates.
func checkReplayed(t *testing.T, recs []replayed, want []int64, name string) int {
	t.Helper()
	seen := map[string]bool{}
	lastOfKey := map[string]int64{}
	wanted := map[int64]bool{}
	for _, id := range want {
		wanted[id] = true
	}
	dups, processed := 0, 0
	for _, r := range recs {
		if r.replay != name {
			t.Errorf("record id %d: outboxd.replay header %q, want %q", r.id, r.replay, name)
		}
		if r.source == "" {
			t.Errorf("record id %d has no outboxd.source header", r.id)
		}
		k := r.source + "/" + strconv.FormatInt(r.id, 10)
		if seen[k] {
			dups++
			continue
		}
		seen[k] = true
		processed++
		if !wanted[r.id] {
			t.Errorf("record id %d was not selected", r.id)
		}
		if last, ok := lastOfKey[r.key]; ok && r.id < last {
			t.Errorf("key %s: id %d processed after %d: a key's rows out of the order they were written", r.key, r.id, last)
		}
		lastOfKey[r.key] = r.id
	}
	if processed != len(want) {
		t.Errorf("%d distinct rows replayed, want %d", processed, len(want))
	}
	return dups
}

// A replay re-publishes the rows a range selects, beside the running
// stream, as the stream made them plus the replay's header; a second run
// of the same command does nothing; a dry run counts; pruned rows are
// named; a predicate reading another table or writing is refused, and so
// is a second replay of the table while one runs.
func TestReplayRepublishesASelection(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(t)
	ids := w.write(t, 40, 0) // 200 rows over 4 keys
	if count, _ := w.consumeAll(t, ids, time.Minute); len(count) != len(ids) {
		t.Fatalf("%d of %d rows streamed", len(count), len(ids))
	}
	_, byKeyStream := w.consumeByKey(t, ids, time.Minute)
	if len(byKeyStream) == 0 {
		t.Fatal("no keys streamed")
	}
	to := testenv.Topic(t, 3)
	sel := ids[50:150]
	args := []string{"--replay-from", strconv.FormatInt(sel[0], 10), "--replay-to", strconv.FormatInt(sel[len(sel)-1], 10), "--replay-topic", to, "--replay-name", "fix-1"}

	code, out := w.replayOut(t, append(args, "--dry-run")...)
	if code != 0 || !strings.Contains(out, "replay fix-1 would publish 100 rows") {
		t.Fatalf("dry run: exit %d, want 0 saying it would publish 100 rows:\n%s", code, out)
	}
	code, out = w.replayOut(t, args...)
	if code != 0 || !strings.Contains(out, "replay fix-1: 100 of 100 rows acknowledged") {
		t.Fatalf("replay: exit %d, want 0 with 100 of 100 rows acknowledged:\n%s", code, out)
	}
	recs := readReplayed(t, w.brokers, to, len(sel), 30*time.Second)
	if dups := checkReplayed(t, recs, sel, "fix-1"); dups != 0 {
		t.Errorf("%d duplicates in a replay that was not interrupted", dups)
	}
	// The same command again: finished, nothing sent.
	code, out = w.replayOut(t, args...)
	if code != 0 || !strings.Contains(out, "finished before") {
		t.Errorf("second run: exit %d, want 0 saying it finished before:\n%s", code, out)
	}
	if again := readReplayed(t, w.brokers, to, len(sel)+1, 3*time.Second); len(again) != len(recs) {
		t.Errorf("after the second run the topic holds %d records, want still %d", len(again), len(recs))
	}
	// The same name for another selection is refused.
	if code, out := w.replayOut(t, "--replay-name", "fix-1", "--replay-from", "1", "--dry-run"); code == 0 || !strings.Contains(out, "give this replay another name") {
		t.Errorf("same name, other selection: exit %d, want refused:\n%s", code, out)
	}

	// Predicates: reading another table, and writing, are refused.
	if _, err := w.pool.Exec(t.Context(), `CREATE TABLE other_table (id bigint)`); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ where, want string }{
		{"id IN (SELECT id FROM other_table)", "reads public.other_table"},
		{"nextval('outbox_id_seq') > 0", "read-only transaction"},
	} {
		code, out := w.replayOut(t, "--replay-where", tt.where, "--replay-topic", to)
		if code == 0 || !strings.Contains(out, tt.want) {
			t.Errorf("--replay-where %q: exit %d, want refused naming %q:\n%s", tt.where, code, tt.want, out)
		}
	}

	// Pruned rows: named, with the range the table holds.
	if _, err := w.pool.Exec(t.Context(), `DELETE FROM outbox WHERE id < $1`, ids[20]); err != nil {
		t.Fatal(err)
	}
	code, out = w.replayOut(t, "--replay-from", strconv.FormatInt(ids[0], 10), "--replay-topic", to, "--dry-run")
	wantHolds := fmt.Sprintf("The table holds id %d to %d", ids[20], ids[len(ids)-1])
	if code != 0 || !strings.Contains(out, wantHolds) || !strings.Contains(out, "would publish 180 rows") {
		t.Errorf("replay from a pruned id: exit %d, want 0 saying %q and 180 rows:\n%s", code, wantHolds, out)
	}

	// A second replay of the table while one runs: refused.
	conn, err := w.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_lock(1868722808, 'outbox'::regclass::oid::int4)`); err != nil {
		t.Fatal(err)
	}
	code, out = w.replayOut(t, "--replay-topic", to, "--replay-name", "second")
	if code == 0 || !strings.Contains(out, "another replay of table public.outbox runs") {
		t.Errorf("a replay while another holds the table: exit %d, want refused:\n%s", code, out)
	}
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_unlock(1868722808, 'outbox'::regclass::oid::int4)`); err != nil {
		t.Fatal(err)
	}

	// The stream went on beside it all.
	more := w.write(t, 2, 1000)
	count, _ := w.consumeAll(t, more, time.Minute)
	for _, id := range more {
		if count[id] != 1 {
			t.Errorf("row %d written after the replays streamed %d times, want once", id, count[id])
		}
	}
	_ = p
}

// A replay killed with -9 resumes where Kafka acknowledged it: every
// selected row arrives, each key's in order, deduplicated by source and
// id nothing is processed twice, and with exactly-once delivery a
// read_committed consumer sees no duplicate at all.
func TestReplayKilledResumes(t *testing.T) {
	t.Parallel()
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			const n = 6000
			rows, err := w.pool.Query(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload)
				SELECT ('00000000-0000-4000-8000-' || lpad((g % 16)::text, 12, '0'))::uuid, $1, jsonb_build_object('n', g)
				FROM generate_series(1, $2::int) g RETURNING id`, w.topic, n)
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
			to := testenv.Topic(t, 3)
			args := []string{"replay", "--database-url", w.url, "--brokers", w.brokers, "--replay-topic", to, "--replay-rate", "1500",
				"--delivery", delivery, "--transaction-interval", "50ms"}
			var opts []kgo.Opt
			if delivery == "exactly-once" {
				opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			}
			kills := 0
			for attempt := 0; attempt < 3; attempt++ {
				p := startProcess(t, args)
				// Kill it once some but not all of it is in Kafka.
				for {
					select {
					case <-p.done:
					case <-time.After(300 * time.Millisecond):
					}
					if closedChan(p.done) {
						break
					}
					if got := len(readReplayed(t, w.brokers, to, 1, 300*time.Millisecond, opts...)); got >= (attempt+1)*n/4 {
						_ = p.cmd.Process.Signal(syscall.SIGKILL)
						<-p.done
						kills++
						break
					}
				}
				if p.cmd.ProcessState.Exited() && p.cmd.ProcessState.ExitCode() != 0 {
					t.Fatalf("replay exited %d:\n%s", p.cmd.ProcessState.ExitCode(), tail(p.log(), 30))
				}
			}
			p := startProcess(t, args)
			if code := p.wait(t, 2*time.Minute); code != 0 {
				t.Fatalf("the resumed replay exited %d:\n%s", code, tail(p.log(), 30))
			}
			if kills == 0 {
				t.Fatal("the replay was never killed: it finished first")
			}
			if !strings.Contains(p.log(), "replay resumed") {
				t.Errorf("the last run did not resume:\n%s", tail(p.log(), 20))
			}
			recs := readReplayed(t, w.brokers, to, n, time.Minute, opts...)
			name := ""
			if len(recs) > 0 {
				name = recs[0].replay
			}
			dups := checkReplayed(t, recs, ids, name)
			t.Logf("measured: %s replay of %d rows, %d kill -9: %d records, %d duplicates (same source and id)", delivery, n, kills, len(recs), dups)
			if delivery == "exactly-once" && dups != 0 {
				t.Errorf("exactly-once replay: %d duplicates for a read_committed consumer, want 0", dups)
			}
		})
	}
}

func closedChan(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
