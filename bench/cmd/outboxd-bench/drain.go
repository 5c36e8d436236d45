package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outboxd/outboxd/bench/internal/servers"
	"github.com/outboxd/outboxd/bench/internal/steady"
	"github.com/outboxd/outboxd/bench/relay"
	"github.com/outboxd/outboxd/harness/procstat"
	"github.com/outboxd/outboxd/internal/demo/pgtemp"
	"github.com/outboxd/outboxd/migrations"
)

// payloadSQL is the backlog's payload: about 230 bytes with the key. g
// is the event's number in the backlog, from 1.
const payloadSQL = `jsonb_build_object('n', g, 'pad', repeat('x', 200))`

// backlogSQL writes n events in transactions of size rows into a table, in
// the server (a DO block committing every size rows); vals may use g, the
// event's number from 1.
func backlogSQL(table, cols, vals string, n, size int) string {
	return fmt.Sprintf(`DO $$ BEGIN FOR i IN 0..%d LOOP
		INSERT INTO %s (%s) SELECT %s FROM generate_series(i*%d+1, (i+1)*%d) g;
		COMMIT; END LOOP; END $$`, n/size-1, table, cols, vals, size, size)
}

// drain prepares a fresh database with the system's table and slot, writes
// the backlog while the system is stopped, then times the system draining it.
// drain runs one backlog drain of sys. With profile, outboxd's drain is
// CPU-profiled (the result is then not a timed repetition); the first
// repetition records the walsender with perf.
func (e *env) drain(ctx context.Context, sys string, rep int, profile bool) (d drainResult, prof string, err error) {
	d = drainResult{System: sys, Rep: rep + 1, Events: e.o.events}
	suffix := strconv.Itoa(rep)
	if rep < 0 {
		suffix = "untimed"
	}
	db := fmt.Sprintf("bench_%s_%s", strings.ReplaceAll(sys, "-", "_"), suffix)
	slot := db
	topic := fmt.Sprintf("bench.%s.%s", sys, suffix)
	if err := e.Exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)", "CREATE DATABASE "+db); err != nil {
		return d, "", err
	}
	defer func() {
		e.dropDatabase(context.WithoutCancel(ctx), db)
		adm := e.Admin()
		defer adm.Close()
		_, _ = adm.DeleteTopics(context.WithoutCancel(ctx), topic)
	}()
	if err := e.CreateTopics(ctx, topic); err != nil {
		return d, "", err
	}
	var backlog, table string
	switch {
	case sys == "pg_recvlogical" || isOutboxd(sys):
		table = "outbox"
		if err := e.migrate(ctx, db); err != nil {
			return d, "", err
		}
		if err := e.Exec(ctx, db, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, slot)); err != nil {
			return d, "", err
		}
		backlog = backlogSQL("outbox", "aggregate_id, topic, payload", fmt.Sprintf("md5((g %% 1000)::text)::uuid, '%s', %s", topic, payloadSQL), e.o.events, e.o.txSize)
	case sys == "relay":
		table = "outbox_relay"
		// Autovacuum off on the table: count the dead tuples the relay leaves
		// for vacuum, rather than how many vacuum happened to remove meanwhile.
		if err := e.Exec(ctx, db, relay.Schema, "ALTER TABLE outbox_relay SET (autovacuum_enabled = false)", "CREATE EXTENSION IF NOT EXISTS pgstattuple"); err != nil {
			return d, "", err
		}
		backlog = backlogSQL("outbox_relay", "aggregate_id, topic, payload", fmt.Sprintf("md5((g %% 1000)::text)::uuid, '%s', %s", topic, payloadSQL), e.o.events, e.o.txSize)
	case sys == "debezium" || sys == "debezium-eos":
		if e.o.debezium == "" {
			return d, "", errSkipped
		}
		table = "outbox_debezium"
		if err := e.SetUpDebezium(ctx, e.o.debezium, db, slot); err != nil {
			return d, "", err
		}
		backlog = backlogSQL("outbox_debezium", "id, aggregatetype, aggregateid, type, payload", fmt.Sprintf("gen_random_uuid(), 'events', md5((g %% 1000)::text), 'Event', %s", payloadSQL), e.o.events, e.o.txSize)
	default:
		return d, "", fmt.Errorf("unknown system %q", sys)
	}
	before, err := e.lsn(ctx, db)
	if err != nil {
		return d, "", err
	}
	// The backlog writer alone skips the commit flush; the server stays durable.
	if err := e.Exec(ctx, db, "SET synchronous_commit = off", backlog); err != nil {
		return d, "", fmt.Errorf("writing the backlog: %w", err)
	}
	target, err := e.lsn(ctx, db)
	if err != nil {
		return d, "", err
	}
	d.InsertWALBytes = target - before
	// Vacuum now, so that autovacuum does not pick the fresh million rows
	// up in the middle of some system's drain and take CPU from it.
	if err := e.Exec(ctx, db, "VACUUM (ANALYZE) "+table, "CHECKPOINT"); err != nil {
		return d, "", err
	}
	base, err := e.lsn(ctx, db)
	if err != nil {
		return d, "", err
	}
	e.warmWAL()

	watchSlot := slot
	if sys == "relay" {
		watchSlot = ""
	}
	w := e.watchCPU(ctx, db, watchSlot)
	defer w.cancel()
	var perfc <-chan string
	if rep == 0 && watchSlot != "" && e.o.perf {
		perfc = walsenderPerf(ctx, w, 3*time.Second)
	}
	// The first record in Kafka is noted too: after the stream's start,
	// it shows how long a system buffers before its first send.
	var first func() time.Time
	kafkaTopic := "" // where the system's records go
	switch {
	case isOutboxd(sys) || sys == "relay":
		kafkaTopic = topic
	case sys == "debezium" || sys == "debezium-eos":
		kafkaTopic = steady.DebeziumTopic(topic)
	}
	if kafkaTopic != "" {
		first = e.firstRecord(ctx, kafkaTopic)
		defer first() // stops the polling when the drain fails
	}
	stream, err := e.watchStream(ctx, db, watchSlot)
	if err != nil {
		return d, "", err
	}
	defer stream.stop()
	start := time.Now()
	var u usage
	switch {
	case sys == "pg_recvlogical":
		u, err = e.runRecvlogical(ctx, db, slot, target)
	case isOutboxd(sys):
		u, prof, err = e.runOutboxd(ctx, sys, db, slot, target, profile && sys == "outboxd")
	case sys == "relay":
		u, err = e.runRelay(ctx, db)
	case sys == "debezium" || sys == "debezium-eos":
		u, err = e.runDebezium(ctx, db, topic, slot, sys == "debezium-eos")
	}
	if err != nil {
		return d, "", err
	}
	end := u.end
	if end.IsZero() {
		end = time.Now()
	}
	seen := stream.stop()
	seen.Launched = start
	timing, err := timeDrain(seen, end)
	if err != nil {
		return d, "", fmt.Errorf("timing the drain of %s: %w", sys, err)
	}
	from := start.Add(timing.Startup)
	d.TimedFrom = timing.From
	d.StartupSeconds = timing.Startup.Seconds()
	d.Seconds = timing.Drain.Seconds()
	d.EventsPerSec = float64(e.o.events) / d.Seconds
	if first != nil {
		if at := first(); !at.IsZero() && !at.Before(from) {
			d.FirstRecordSeconds = min(at.Sub(from), end.Sub(from)).Seconds() // polled: it may be seen after the end
		}
	}
	d.PeakRSSBytes, d.CPUSeconds = u.maxRSS, u.cpu
	d.WalsenderCPUSeconds, d.MachineBusy = w.finish(from.Sub(w.start), end.Sub(w.start))
	if perfc != nil {
		d.WalsenderPerf = <-perfc
	}
	after, err := e.lsn(ctx, db)
	if err != nil {
		return d, "", err
	}
	d.DrainWALBytes = after - base
	if kafkaTopic != "" {
		if d.TopicBytes, err = e.topicBytes(ctx, kafkaTopic); err != nil {
			return d, "", fmt.Errorf("reading the size of topic %s: %w", kafkaTopic, err)
		}
	}
	if sys == "relay" {
		d.DeadTuples, d.UpdatedRows, err = e.deadTuples(ctx, db, "outbox_relay")
		if err != nil {
			return d, "", err
		}
	}
	return d, prof, nil
}

// dropDatabase drops db and its slots. A slot stays active for a moment
// after its reader stopped, and a database with a slot cannot be dropped:
// wait for that (up to 15 s) rather than leave both behind.
func (e *env) dropDatabase(ctx context.Context, db string) {
	for range 75 {
		if err := e.Exec(ctx, "postgres",
			fmt.Sprintf("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '%s' AND NOT active", db),
			"DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.log.Warn("could not drop a benchmark database", "database", db)
}

// usage is what a system cost: when its drain ended, peak RSS, CPU
// (start-up included).
type usage struct {
	end    time.Time
	maxRSS int64
	cpu    float64
}

// firstRecord polls topic's end offsets every 10 ms from now until a record
// is there; the returned function stops polling and tells when it saw the
// first (zero if none).
func (e *env) firstRecord(ctx context.Context, topic string) func() time.Time {
	ctx, cancel := context.WithCancel(ctx)
	seen := make(chan time.Time, 1)
	go func() {
		adm := e.Admin()
		defer adm.Close()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if n, err := recordsIn(ctx, adm, topic); err == nil && n > 0 {
				seen <- time.Now()
				return
			}
			select {
			case <-ctx.Done():
				seen <- time.Time{}
				return
			case <-t.C:
			}
		}
	}()
	return sync.OnceValue(func() time.Time {
		select {
		case at := <-seen:
			cancel()
			return at
		default:
		}
		cancel()
		return <-seen
	})
}

// cpuSeconds is the user and system CPU time of an exited child.
func cpuSeconds(ps *os.ProcessState) float64 {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// peakRSS samples a child's own high-water mark (VmHWM) every 20 ms until
// the returned function is first called; it returns the largest sample
// (not wait4's ru_maxrss, which is not the child's own: see procstat).
func peakRSS(pid int) func() int64 {
	done := make(chan struct{})
	result := make(chan int64, 1)
	go func() {
		var peak int64
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, err := procstat.PeakRSS(pid); err == nil && rss > peak {
				peak = rss
			}
			select {
			case <-done:
				result <- peak
				return
			case <-t.C:
			}
		}
	}()
	return sync.OnceValue(func() int64 { close(done); return <-result })
}

// runChild runs cmd to its end, returning its combined output, end time,
// own peak RSS and CPU seconds.
func runChild(cmd *exec.Cmd) ([]byte, usage, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, usage{}, err
	}
	peak := peakRSS(cmd.Process.Pid)
	err := cmd.Wait()
	end := time.Now()
	rss := peak()
	if err != nil {
		return out.Bytes(), usage{}, err
	}
	return out.Bytes(), usage{end: end, maxRSS: rss, cpu: cpuSeconds(cmd.ProcessState)}, nil
}

func (e *env) migrate(ctx context.Context, db string) error {
	conn, err := pgx.Connect(ctx, e.DatabaseURL(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = migrations.Apply(ctx, conn, migrations.Target{Table: "public.outbox", Publication: "outboxd"}, e.log)
	return err
}

func (e *env) runRecvlogical(ctx context.Context, db, slot string, target int64) (usage, error) {
	bin, err := pgtemp.BinDir()
	if err != nil {
		return usage{}, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_recvlogical"), "-d", e.DatabaseURL(db), "--slot", slot, "--start",
		"--endpos", lsnText(target), "-o", "proto_version=1", "-o", "publication_names=outboxd", "-f", "/dev/null", "--no-loop")
	out, u, err := runChild(cmd)
	if err != nil {
		return usage{}, fmt.Errorf("pg_recvlogical: %w\n%s", err, out)
	}
	return u, nil
}

func lsnText(v int64) string { return fmt.Sprintf("%X/%X", uint64(v)>>32, uint32(v)) }

// outboxdBinary is the binary measured as sys: "outboxd-baseline" is an
// earlier build (-baseline) measured in the same run for a before/after.
func (e *env) outboxdBinary(sys string) string {
	if sys == "outboxd-baseline" {
		return e.o.baseline
	}
	return e.o.outboxd
}

// codecSystems are the systems that are outboxd with another --compression
// than its default, snappy.
var codecSystems = []string{"outboxd-none", "outboxd-gzip", "outboxd-lz4", "outboxd-zstd"}

// isOutboxd reports whether sys is an outboxd binary, whatever its flags.
func isOutboxd(sys string) bool {
	return sys == "outboxd" || sys == "outboxd-baseline" || sys == "outboxd-eos" || sys == "outboxd-linger" || slices.Contains(codecSystems, sys) ||
		slices.Contains(formatSystems, sys)
}

// outboxdArgs are the flags that make sys what it is: "outboxd-eos" is the
// same binary as "outboxd" with --delivery exactly-once (defaults
// otherwise: a Kafka transaction every 100 ms); "outboxd-linger" is outboxd
// with --read-linger (-read-linger); "outboxd-zstd" and the other codec
// systems are outboxd with that --compression; "outboxd-avro" and the
// other format systems with that --value-format (formatArgs).
func (e *env) outboxdArgs(sys string) []string {
	switch sys {
	case "outboxd-eos":
		return []string{"--delivery", "exactly-once"}
	case "outboxd-linger":
		return []string{"--read-linger", e.o.readLinger.String()}
	}
	if slices.Contains(codecSystems, sys) {
		return []string{"--compression", strings.TrimPrefix(sys, "outboxd-")}
	}
	if slices.Contains(formatSystems, sys) {
		return e.formatArgs(sys)
	}
	return nil
}

// topicBytes is the size of the topic's log on the broker: the record
// batches as the producer sent them (compressed or not), framing included.
func (e *env) topicBytes(ctx context.Context, topic string) (int64, error) {
	adm := e.Admin()
	defer adm.Close()
	dirs, err := adm.DescribeAllLogDirs(ctx, nil) // every partition; filtered below
	if err != nil {
		return 0, err
	}
	var n int64
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Topic == topic {
				n += p.Size
			}
		})
	})
	return n, nil
}

func (e *env) runOutboxd(ctx context.Context, sys, db, slot string, target int64, profile bool) (usage, string, error) {
	addr, err := servers.FreeAddr()
	if err != nil {
		return usage{}, "", err
	}
	cmd := exec.Command(e.outboxdBinary(sys), append([]string{"run", "--database-url", e.DatabaseURL(db), "--brokers", e.Kafka.Addr, "--slot", slot,
		"--metrics-addr", addr, "--pprof", "--log-level", "warn"}, e.outboxdArgs(sys)...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return usage{}, "", err
	}
	defer cmd.Process.Kill() //nolint:errcheck // already stopped on success
	peak := peakRSS(cmd.Process.Pid)
	defer peak()
	profFile := filepath.Join(e.o.out, "outboxd-drain.pprof")
	profc := make(chan error, 1)
	if profile {
		go func() { profc <- cpuProfile(addr, 4*time.Second, profFile) }()
	}
	if err := e.waitConfirmed(ctx, db, slot, target, 10*time.Minute); err != nil {
		return usage{}, "", err
	}
	end := time.Now()
	prof := ""
	if profile {
		// Formatted only now: go tool pprof would take CPU from the drain.
		if err := <-profc; err != nil {
			prof = "profile: " + err.Error()
		} else {
			prof = pprofTop(profFile)
		}
	}
	rss, _ := procstat.PeakRSS(cmd.Process.Pid) // 0 if unreadable; the samples count too
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		return usage{}, "", fmt.Errorf("outboxd exited with %v after the drain", err)
	}
	return usage{end: end, maxRSS: max(rss, peak()), cpu: cpuSeconds(cmd.ProcessState)}, prof, nil
}

// cpuProfile takes a CPU profile through --pprof (waiting for the server)
// into file.
func cpuProfile(addr string, d time.Duration, file string) error {
	var resp *http.Response
	var err error
	for range 50 {
		if resp, err = http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds()))); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pprofTop returns `go tool pprof -top` of a profile file.
func pprofTop(file string) string {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", file).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("pprof: %v\n%s", err, out)
	}
	return string(out)
}

func (e *env) waitConfirmed(ctx context.Context, db, slot string, target int64, limit time.Duration) error {
	conn, err := pgx.Connect(ctx, e.DatabaseURL(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var c int64
		if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&c); err != nil {
			return err
		}
		if c >= target {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("slot %s not confirmed to the backlog's end within %s", slot, limit)
}

func (e *env) runRelay(ctx context.Context, db string) (usage, error) {
	cmd := exec.CommandContext(ctx, e.o.relay, "--database-url", e.DatabaseURL(db), "--brokers", e.Kafka.Addr, "--drain", "--workers", "4", "--batch", "500")
	out, u, err := runChild(cmd)
	if err != nil {
		return usage{}, fmt.Errorf("relay: %w\n%s", err, out)
	}
	if !strings.Contains(string(out), "published "+strconv.Itoa(e.o.events)) {
		return usage{}, fmt.Errorf("relay published the wrong count: %s", out)
	}
	return u, nil
}

// deadTuples returns the dead tuples left in the table and the rows
// updated (the relay's backends have exited, so their statistics are in).
func (e *env) deadTuples(ctx context.Context, db, table string) (dead, updated int64, err error) {
	conn, err := pgx.Connect(ctx, e.DatabaseURL(db))
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, `SELECT dead_tuple_count FROM pgstattuple($1)`, table).Scan(&dead); err != nil {
		return 0, 0, err
	}
	err = conn.QueryRow(ctx, `SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = $1`, table).Scan(&updated)
	return dead, updated, err
}

// recordsIn sums the end offsets of topics.
func recordsIn(ctx context.Context, adm *kadm.Client, topics ...string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}
