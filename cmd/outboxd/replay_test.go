package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/idempotent"
	"github.com/outboxd/outboxd/internal/config"
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

// A replay stopped with SIGTERM, then killed with -9 twice, resumes where
// Kafka acknowledged it, while the pipeline streams beside it: every
// selected row arrives, each key's in order; deduplicated by source and
// id nothing is processed twice, and with exactly-once delivery a
// read_committed consumer sees no duplicate at all; the stream loses
// nothing and sends nothing twice.
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
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			w.start(t, "--delivery", delivery)
			var opts []kgo.Opt
			if delivery == "exactly-once" {
				opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			}
			if count, _ := w.consumeAll(t, ids, 2*time.Minute, opts...); len(count) != n {
				t.Fatalf("%d of %d rows streamed before the replay", len(count), n)
			}
			// The stream goes on beside the replay.
			ctx, stopWriting := context.WithCancel(t.Context())
			written := make(chan []int64, 1)
			go func() {
				var all []int64
				for i := 0; ctx.Err() == nil; i++ {
					got, _ := w.tryWrite(ctx, 1, 100000+i*5)
					all = append(all, got...)
					time.Sleep(20 * time.Millisecond)
				}
				written <- all
			}()

			to := testenv.Topic(t, 3)
			args := []string{"replay", "--database-url", w.url, "--brokers", w.brokers, "--replay-topic", to, "--replay-rate", "1500", "--replay-to", strconv.FormatInt(ids[n-1], 10),
				"--delivery", delivery, "--transaction-interval", "50ms"}
			stops := 0
			for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGKILL} {
				p := startProcess(t, args)
				// Stop it once some but not all of it is in Kafka.
				for !closedChan(p.done) {
					if got := len(readReplayed(t, w.brokers, to, 1, 300*time.Millisecond, opts...)); got >= (i+1)*n/4 {
						_ = p.cmd.Process.Signal(sig)
						<-p.done
						stops++
						break
					}
				}
				state := p.cmd.ProcessState
				switch {
				case state.Exited() && state.ExitCode() != 0:
					t.Fatalf("replay exited %d:\n%s", state.ExitCode(), tail(p.log(), 30))
				case sig == syscall.SIGTERM && !strings.Contains(p.log(), "replay stopped: run it again to resume"):
					t.Errorf("after SIGTERM the replay did not say it stopped:\n%s", tail(p.log(), 10))
				}
			}
			p := startProcess(t, args)
			if code := p.wait(t, 2*time.Minute); code != 0 {
				t.Fatalf("the resumed replay exited %d:\n%s", code, tail(p.log(), 30))
			}
			if stops != 3 {
				t.Fatalf("the replay was stopped %d times, want 3: it finished first", stops)
			}
			if !strings.Contains(p.log(), "replay resumed") {
				t.Errorf("the last run did not resume:\n%s", tail(p.log(), 20))
			}
			stopWriting()
			streamed := <-written
			recs := readReplayed(t, w.brokers, to, n, time.Minute, opts...)
			name := ""
			if len(recs) > 0 {
				name = recs[0].replay
			}
			dups := checkReplayed(t, recs, ids, name)
			count, _ := w.consumeAll(t, streamed, time.Minute, opts...)
			streamDups := 0
			for _, id := range streamed {
				streamDups += max(count[id]-1, 0)
			}
			t.Logf("measured: %s replay of %d rows, SIGTERM and 2 kill -9: %d records, %d duplicates (same source and id); stream beside it: %d rows, %d duplicates",
				delivery, n, len(recs), dups, len(streamed), streamDups)

			// Consumers built on package idempotent: one that processed the
			// stream processes nothing of the replay; a new one processes
			// each replayed row once.
			if got, _ := consumeIdempotent(t, w, "svc", w.topic, opts...); got != n+len(streamed) {
				t.Errorf("the stream's consumer processed %d records, want %d", got, n+len(streamed))
			}
			if got, skipped := consumeIdempotent(t, w, "svc", to, opts...); got != 0 || skipped != len(recs) {
				t.Errorf("the stream's consumer, on the replay: %d processed, %d skipped; want 0 and %d", got, skipped, len(recs))
			}
			if got, skipped := consumeIdempotent(t, w, "fresh", to, opts...); got != n || skipped != len(recs)-n {
				t.Errorf("a new consumer, on the replay: %d processed, %d skipped; want %d and %d", got, skipped, n, len(recs)-n)
			}
			if delivery == "exactly-once" && dups != 0 {
				t.Errorf("exactly-once replay: %d duplicates for a read_committed consumer, want 0", dups)
			}
			if streamDups != 0 {
				t.Errorf("the stream beside the replay sent %d rows twice, want none", streamDups)
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

// A table whose id is a uuid replays in the order of its ordering column
// (--backfill-order-column), rows without a value last, across pages and
// across a kill -9; a time range selects by created_at when no
// --timestamp-column is given.
func TestReplayOrdersByAnOrderingColumn(t *testing.T) {
	t.Parallel()
	db := testenv.Database(t)
	pool := poolFor(t, db)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE app_events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregate_id uuid NOT NULL,
		topic text NOT NULL, payload jsonb NOT NULL, headers jsonb, created_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := outboxd(t, nil, "migrate", "--database-url", db, "--own-table", "--table", "app_events", "--create-slot=false"); code != exitOK {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	const timed, untimed = 1100, 600 // pages of 500 end inside both parts
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(t.Context(), `INSERT INTO app_events (aggregate_id, topic, payload, created_at)
		SELECT ('00000000-0000-4000-8000-' || lpad((g % 8)::text, 12, '0'))::uuid, 'unused', jsonb_build_object('n', g),
			CASE WHEN g <= $2 THEN $1::timestamptz + g * interval '1 millisecond' END
		FROM generate_series(1, $3::int) g`, base, timed, timed+untimed); err != nil {
		t.Fatal(err)
	}
	brokers := strings.Join(testenv.Brokers(t), ",")
	to := testenv.Topic(t, 3)
	args := []string{"replay", "--database-url", db, "--brokers", brokers, "--table", "app_events", "--backfill-order-column", "created_at", "--replay-topic", to}

	// A time range, by created_at: rows 500 to 699.
	code, out, errOut := outboxd(t, nil, append(args, "--dry-run", "--replay-since", base.Add(500*time.Millisecond).Format(time.RFC3339Nano),
		"--replay-until", base.Add(700*time.Millisecond).Format(time.RFC3339Nano))...)
	if code != exitOK || !strings.Contains(out, "would publish 200 rows") {
		t.Errorf("dry run of a time range: exit %d, want 0 saying 200 rows:\n%s%s", code, out, errOut)
	}

	p := startProcess(t, append(args, "--replay-rate", "500"))
	for !closedChan(p.done) && len(readReplayed(t, brokers, to, 1, 300*time.Millisecond)) < 400 {
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	if code, out, errOut := outboxd(t, nil, args...); code != exitOK || !strings.Contains(out, "acknowledged by Kafka") || !strings.Contains(errOut, "replay resumed") {
		t.Fatalf("the resumed replay: exit %d, want 0, resumed:\n%s%s", code, out, errOut)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Brokers(t)...), kgo.ConsumeTopics(to), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{}
	lastOfKey := map[string]int{}
	for deadline := time.Now().Add(time.Minute); len(seen) < timed+untimed && time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			id := ""
			for _, h := range r.Headers {
				if h.Key == "id" {
					id = string(h.Value)
				}
			}
			if seen[id] {
				return // sent again after the kill: an idempotent consumer skips it
			}
			seen[id] = true
			var v struct{ N int }
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("record value %q: %v", r.Value, err)
			}
			last, ok := lastOfKey[string(r.Key)]
			switch {
			case ok && v.N <= timed && v.N < last:
				t.Errorf("key %s: row %d after row %d: not in the order of created_at", r.Key, v.N, last)
			case ok && v.N <= timed && last > timed:
				t.Errorf("key %s: row %d (with created_at) after row %d (without): rows without a value come last", r.Key, v.N, last)
			}
			lastOfKey[string(r.Key)] = max(last, v.N)
		})
	}
	if len(seen) != timed+untimed {
		t.Errorf("%d distinct rows replayed, want %d", len(seen), timed+untimed)
	}
}

// replay's messages name its settings by the flags that set them: the
// pipeline's own, or replay's.
func TestReplayNamesItsSettingsByTheirFlags(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	n := replayNames(cfg.SettingNames())
	for path, want := range map[string]string{
		"Table": "--table", "Columns.Timestamp": "--timestamp-column", "BackfillOrderColumn": "--backfill-order-column",
		"PrimaryURL": "--primary-url", "Name": "--replay-name", "Selection.Where": "--replay-where", "Selection.Since": "--replay-since", "Topic": "--replay-topic",
	} {
		if got := n.Of(path); got != want {
			t.Errorf("%s is named %q, want %q", path, got, want)
		}
	}
}

// consumeIdempotent consumes topic from its start with a consumer built on
// package idempotent named name (its own group per topic), each record it
// processes a row of table processed_<name>, until every record of the
// topic is processed or skipped; it returns how many were processed and
// skipped as duplicates.
func consumeIdempotent(t *testing.T, w *world, name, topic string, opts ...kgo.Opt) (processed, skipped int) {
	t.Helper()
	ctx := t.Context()
	table := "processed_" + name
	if _, err := w.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (outbox_id bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c, err := idempotent.New(ctx, idempotent.Config{Brokers: strings.Split(w.brokers, ","), Group: name + "-" + topic, Name: name, Topics: []string{topic},
		Metrics: reg, BatchSize: 500, KafkaOpts: opts, Handler: func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
			id, _ := idempotent.IDHeader(r)
			_, err := tx.Exec(ctx, `INSERT INTO `+table+` (outbox_id) VALUES ($1)`, id)
			return err
		}}, w.pool)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	total := float64(len(readReplayed(t, w.brokers, topic, 1, 2*time.Second, opts...)))
	counts := func() (float64, float64) {
		return testenv.CounterValue(t, reg, "outboxd_consumer_processed_total"), testenv.CounterValue(t, reg, "outboxd_consumer_duplicates_total")
	}
	waitFor(t, 2*time.Minute, "every record of "+topic+" consumed", func() bool { p, d := counts(); return p+d >= total })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p, d := counts()
	return int(p), int(d)
}
