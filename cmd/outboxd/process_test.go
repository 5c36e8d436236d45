package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/procstat"
	"github.com/outboxd/outboxd/harness/testenv"
)

// proc is an `outboxd` child process.
type proc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	mu     *sync.Mutex
	done   chan struct{}
}

// world is one test's database and topic with `outboxd migrate` applied.
type world struct {
	url, brokers, topic, slot string
	pool                      *pgxpool.Pool
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return migratedWorld(t, testenv.Database(t))
}

// migratedWorld is newWorld on the database at dbURL, with migrateArgs
// added to `outboxd migrate`'s.
func migratedWorld(t *testing.T, dbURL string, migrateArgs ...string) *world {
	t.Helper()
	w := &world{url: dbURL, brokers: strings.Join(testenv.Brokers(t), ","), topic: testenv.Topic(t, 3), slot: testenv.Name(t, "slot")}
	if out, err := exec.Command(builtBinary, append([]string{"migrate", "--database-url", w.url, "--slot", w.slot}, migrateArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate: %v\n%s", err, out)
	}
	var err error
	if w.pool, err = pgxpool.New(t.Context(), w.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pool.Close)
	return w
}

func (w *world) start(t *testing.T, extra ...string) *proc {
	t.Helper()
	args := append([]string{"run", "--slot", w.slot, "--status-interval", "200ms"}, extra...)
	return startProcess(t, args, "OUTBOXD_DATABASE_URL="+w.url, "OUTBOXD_BROKERS="+w.brokers)
}

// startProcess starts outboxd with args and env added to the test's
// environment; it is killed when the test ends, and its log shown if the
// test failed.
func startProcess(t *testing.T, args []string, env ...string) *proc {
	t.Helper()
	return startWrapped(t, nil, args, env...)
}

// startWrapped is startProcess with outboxd's command line passed through
// wrap (nil: none), which returns the command line to run instead (one
// that execs outboxd, such as testenv.MemoryCgroup.Wrap).
func startWrapped(t *testing.T, wrap func(argv ...string) []string, args []string, env ...string) *proc {
	t.Helper()
	argv := append([]string{builtBinary}, args...)
	if wrap != nil {
		argv = wrap(argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, stderr: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("outboxd %s's log:\n%s", strings.Join(args, " "), tail(p.log(), 80))
		}
	})
	return p
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func (p *proc) log() string { p.mu.Lock(); defer p.mu.Unlock(); return p.stderr.String() }

func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("outboxd did not exit within %s; log:\n%s", d, p.log())
		return -1
	}
}

// write inserts n transactions of 5 rows and returns their ids.
func (w *world) write(t *testing.T, n, from int) []int64 {
	t.Helper()
	ids, err := w.tryWrite(t.Context(), n, from)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// tryWrite is write for goroutines other than the test's own.
func (w *world) tryWrite(ctx context.Context, n, from int) ([]int64, error) {
	var ids []int64
	for i := range n {
		rows, err := w.pool.Query(ctx, `INSERT INTO outbox (aggregate_id, topic, payload)
			SELECT ('00000000-0000-4000-8000-' || lpad(($1 + g % 4)::text, 12, '0'))::uuid, $2, jsonb_build_object('n', $1 + g)
			FROM generate_series(1, 5) g RETURNING id`, from+i*5, w.topic)
		if err != nil {
			return ids, err
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return ids, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// consumeAll reads the topic from the start until every id in want is there
// plus a quiet period, returning how often each id arrived and its values.
// opts are added to the consumer's (e.g. read_committed isolation).
func (w *world) consumeAll(t *testing.T, want []int64, d time.Duration, opts ...kgo.Opt) (map[int64]int, map[int64][]string) {
	t.Helper()
	values := map[int64][]string{}
	count := w.consumeEach(t, want, d, func(r *kgo.Record, id int64) { values[id] = append(values[id], string(r.Value)) }, opts...)
	return count, values
}

// consumeByKey is consumeAll returning, per key, the ids in offset order.
func (w *world) consumeByKey(t *testing.T, want []int64, d time.Duration) (map[int64]int, map[string][]int64) {
	t.Helper()
	byKey := map[string][]int64{}
	count := w.consumeEach(t, want, d, func(r *kgo.Record, id int64) { byKey[string(r.Key)] = append(byKey[string(r.Key)], id) })
	return count, byKey
}

// consumeEach reads the topic from the start until every id in want is
// there plus a quiet period, calling each for every record with an id
// header, and returns how often each id arrived.
func (w *world) consumeEach(t *testing.T, want []int64, d time.Duration, each func(r *kgo.Record, id int64), opts ...kgo.Opt) map[int64]int {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(w.brokers, ",")...), kgo.ConsumeTopics(w.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	count := map[int64]int{}
	missing := func() int {
		m := 0
		for _, id := range want {
			if count[id] == 0 {
				m++
			}
		}
		return m
	}
	deadline := time.Now().Add(d)
	quietUntil := time.Time{}
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "id" {
					id, _ := strconv.ParseInt(string(h.Value), 10, 64)
					count[id]++
					each(r, id)
				}
			}
		})
		if missing() == 0 {
			if quietUntil.IsZero() {
				quietUntil = time.Now().Add(2 * time.Second)
			} else if time.Now().After(quietUntil) {
				return count
			}
		}
	}
	t.Fatalf("%d of %d ids never arrived within %s", missing(), len(want), d)
	return nil
}

// TestSIGTERMRestartPublishesNoDuplicates: SIGTERM mid-stream exits 0 after
// draining; the restart sends nothing twice.
func TestSIGTERMRestartPublishesNoDuplicates(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := newWorld(t)
	var want []int64
	for round := range 3 {
		p := w.start(t)
		// A SIGTERM before the runtime installed the handler takes the
		// default action; that is not the graceful stop under test.
		waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })
		want = append(want, w.write(t, 40, round*1000)...)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("round %d: exit code %d after SIGTERM; log:\n%s", round, code, p.log())
		}
	}
	p := w.start(t)
	count, _ := w.consumeAll(t, want, 2*time.Minute)
	for id, n := range count {
		if n != 1 {
			t.Errorf("outbox id %d published %d times across SIGTERM restarts", id, n)
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, time.Minute)
}

// TestKill9RestartLosesNothing: kill -9 mid-stream, restart: every row
// arrives; rows sent twice carry the same id and payload.
func TestKill9RestartLosesNothing(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := newWorld(t)
	var want []int64
	for round := range 3 {
		p := w.start(t)
		// The writes run in a goroutine, which must not call t.Fatal:
		// tryWrite reports errors instead.
		var ids []int64
		var werr error
		written := make(chan struct{})
		go func() { defer close(written); ids, werr = w.tryWrite(t.Context(), 60, round*1000) }()
		time.Sleep(time.Duration(300+round*200) * time.Millisecond)
		p.kill(t)
		<-written
		if werr != nil {
			t.Fatal(werr)
		}
		want = append(want, ids...)
	}
	p := w.start(t)
	count, values := w.consumeAll(t, want, 2*time.Minute)
	dups := 0
	for id, n := range count {
		if n > 1 {
			dups += n - 1
			for _, v := range values[id][1:] {
				if v != values[id][0] {
					t.Errorf("outbox id %d re-sent with another payload: %s vs %s", id, v, values[id][0])
				}
			}
		}
	}
	t.Logf("measured: kill -9 x3: %d rows, %d duplicates (same id and payload)", len(want), dups)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, time.Minute)
}

// TestMissingPublicationExitsNonZero: `run` without `migrate` tells the
// operator what to do and exits 1.
func TestMissingPublicationExitsNonZero(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := &world{url: testenv.Database(t), brokers: strings.Join(testenv.Brokers(t), ","), slot: testenv.Name(t, "slot")}
	p := w.start(t)
	if code := p.wait(t, time.Minute); code != exitError {
		t.Fatalf("exit code %d, want %d; log:\n%s", code, exitError, p.log())
	}
	if !strings.Contains(p.log(), "outboxd migrate") {
		t.Errorf("log does not tell to run outboxd migrate:\n%s", p.log())
	}
}

// TestSecondInstanceStandsByThenTakesOver: the second `outboxd run` on a
// busy slot waits (logging it once) and takes over when the first exits.
func TestSecondInstanceStandsByThenTakesOver(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	w := newWorld(t)
	first := w.start(t)
	want := w.write(t, 2, 0)
	w.consumeAll(t, want, time.Minute)
	second := w.start(t, "--slot-retry-interval", "100ms")
	// Wait for the first line (however slow the start under -race), then
	// for many more retries: the line must not repeat.
	waitFor(t, 30*time.Second, "standby logs the busy slot", func() bool { return strings.Contains(second.log(), "in use by another process") })
	time.Sleep(20 * 100 * time.Millisecond)
	if n := strings.Count(second.log(), "in use by another process"); n != 1 {
		t.Errorf("standby logged the busy slot %d times, want once:\n%s", n, second.log())
	}
	first.kill(t)
	want = append(want, w.write(t, 2, 100)...)
	w.consumeAll(t, want, time.Minute)
	_ = second.cmd.Process.Signal(syscall.SIGTERM)
	if code := second.wait(t, time.Minute); code != 0 {
		t.Fatalf("standby exit code %d; log:\n%s", code, second.log())
	}
}

// TestMillionRowTransactionBoundedMemory streams one transaction of
// 1,000,000 rows and reports the publisher's peak RSS.
func TestMillionRowTransactionBoundedMemory(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(t)
	const n = 1_000_000
	start := time.Now()
	if _, err := w.pool.Exec(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload)
		SELECT ('00000000-0000-4000-8000-' || lpad((g % 1000)::text, 12, '0'))::uuid, $1,
		       jsonb_build_object('n', g, 'pad', repeat('x', 180))
		FROM generate_series(1, $2::int) g`, w.topic, n); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(w.brokers, ",")...), kgo.ConsumeTopics(w.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	deadline := time.Now().Add(8 * time.Minute)
	for got < n && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		got += cl.PollFetches(ctx).NumRecords()
		cancel()
	}
	if got < n {
		t.Fatalf("consumed %d of %d records; log:\n%s", got, n, p.log())
	}
	elapsed := time.Since(start)
	peak, err := procstat.PeakRSS(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("measured: 1,000,000-row transaction: consumed in %s (%.0f rows/s incl. the insert), publisher peak RSS %d MiB", elapsed.Round(time.Second), n/elapsed.Seconds(), peak>>20)
	// The in-flight caps (16 MiB of records by default) bound memory; a
	// publisher holding the transaction would need over 250 MB.
	if peak > 200<<20 {
		t.Errorf("publisher peak RSS %d MiB: the transaction is being held in memory", peak>>20)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM; log:\n%s", code, p.log())
	}
}

// TestDemoShowsRecordsFlowing runs the README's set-up command end to end:
// throwaway PostgreSQL, in-process Kafka, writers, consumer output.
func TestDemoShowsRecordsFlowing(t *testing.T) {
	t.Parallel()
	testenv.AdminURL(t) // the demo needs the PostgreSQL server binaries the test bed installs
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, builtBinary, "demo", "--events", "8", "--interval", "50ms").CombinedOutput()
	if err != nil {
		t.Fatalf("outboxd demo: %v\n%s", err, out)
	}
	var records int
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "orders.") && strings.Contains(line, " id=") && strings.Contains(line, " latency=") && strings.Contains(line, `"order"`) {
			records++
		}
	}
	if records != 8 {
		t.Errorf("demo printed %d records, want 8:\n%s", records, out)
	}
	if !strings.Contains(string(out), "removing the temporary cluster") {
		t.Errorf("demo did not stop cleanly:\n%s", out)
	}
}

// TestLargePayloadsBoundedByInFlightBytes pins the bug where memory was
// bounded by a record count only (the hand-off between reader and
// publisher held about 1,500 events whatever their size, about 1.4 GB of
// 900 KB payloads): with Kafka down, outboxd reads a 180 MB transaction of
// 900 KB payloads only as far as --max-in-flight-bytes (16 MiB) allows.
func TestLargePayloadsBoundedByInFlightBytes(t *testing.T) {
	t.Parallel()
	kafka := testenv.StartKafka(t)
	limit := "2097152"
	w := &world{url: testenv.Database(t), brokers: kafka.Addr, slot: testenv.Name(t, "slot")}
	w.topic = testenv.CreateTopicWithConfig(t, []string{kafka.Addr}, testenv.Name(t, "topic"), 1, map[string]*string{"max.message.bytes": &limit})
	if out, err := exec.Command(builtBinary, "migrate", "--database-url", w.url, "--slot", w.slot).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	var err error
	if w.pool, err = pgxpool.New(t.Context(), w.url); err != nil {
		t.Fatal(err)
	}
	defer w.pool.Close()
	p := w.start(t, "--max-record-bytes", limit, "--metrics-addr", anyPort)
	addr := servedAt(t, p.log)
	waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })
	kafka.Stop(t)

	const rows, size = 200, 900_000
	rowsIDs, err := w.pool.Query(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload)
		SELECT gen_random_uuid(), $1, jsonb_build_object('pad', (SELECT string_agg(md5(random()::text || g::text || i::text), '') FROM generate_series(1, $2::int / 32) i))
		FROM generate_series(1, $3::int) g RETURNING id`, w.topic, size, rows)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rowsIDs, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	// outboxd reads until the window is full, then waits for Kafka.
	waitFor(t, time.Minute, "the in-flight window filled", func() bool {
		_, body := get(addr, "/metrics")
		return metric(body, w.slot, "outboxd_in_flight_bytes") >= 14<<20
	})
	time.Sleep(3 * time.Second)
	peak, err := procstat.PeakRSS(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(addr, "/metrics")
	t.Logf("measured: %d payloads of %d KB in one transaction, Kafka down: %.0f MiB in flight, publisher peak RSS %d MiB",
		rows, size/1000, metric(body, w.slot, "outboxd_in_flight_bytes")/(1<<20), peak>>20)
	if peak > 120<<20 {
		t.Errorf("publisher peak RSS %d MiB with a 16 MiB in-flight byte cap: memory is not bounded in bytes", peak>>20)
	}
	kafka.Start(t)
	count, _ := w.consumeAll(t, ids, 3*time.Minute)
	if len(count) != rows {
		t.Errorf("%d of %d rows arrived", len(count), rows)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, time.Minute)
}

// TestRecordsUpToMaxRecordBytes pins the bug where records over about
// 1 MB could never be sent: the producer's batch limit was never set, so
// franz-go refused them client-side whatever the broker allowed. With a
// topic that takes 10 MiB and --max-record-bytes 10 MiB, a 5 MiB TOASTed
// jsonb payload arrives byte for byte; with the default limit the same row
// stops the run with an error naming the client-side limit.
func TestRecordsUpToMaxRecordBytes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	limit := "10485760"
	w.topic = testenv.CreateTopicWithConfig(t, strings.Split(w.brokers, ","), testenv.Name(t, "big"), 1, map[string]*string{"max.message.bytes": &limit})

	var id int64
	var want string
	err := w.pool.QueryRow(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload)
		SELECT gen_random_uuid(), $1, jsonb_build_object('pad', (SELECT string_agg(md5(random()::text || i::text), '') FROM generate_series(1, (5 << 20) / 32) i))
		RETURNING id, payload::text`, w.topic).Scan(&id, &want)
	if err != nil {
		t.Fatal(err)
	}
	var toasted int64 // the value is stored out of line (TOASTed), as large payloads are
	if err := w.pool.QueryRow(t.Context(), `SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'outbox'::regclass`).Scan(&toasted); err != nil || toasted < 1<<20 {
		t.Fatalf("payload not TOASTed: TOAST table %d bytes (%v)", toasted, err)
	}

	// The default limit (Kafka's 1 MiB) refuses it before sending, saying so.
	p := w.start(t)
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("with the default --max-record-bytes: exit %d, want 1\n%s", code, p.log())
	}
	t.Logf("with the default limit: %s", lastLine(p.log()))
	if l := p.log(); !strings.Contains(l, "max-record-bytes") || !strings.Contains(l, strconv.FormatInt(id, 10)) {
		t.Errorf("the error does not name the outbox id and the client-side limit:\n%s", l)
	}

	p = w.start(t, "--max-record-bytes", limit)
	count, values := w.consumeAll(t, []int64{id}, 2*time.Minute)
	if count[id] != 1 || values[id][0] != want {
		got := 0
		if len(values[id]) > 0 {
			got = len(values[id][0])
		}
		t.Errorf("record %d arrived %d times with %d bytes, want once with the %d bytes committed", id, count[id], got, len(want))
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("exit %d after SIGTERM\n%s", code, p.log())
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
