package main

import (
	"context"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/procstat"
	"github.com/outboxd/outboxd/harness/testenv"
)

// The exactly-once mode against the real broker: a read_committed consumer
// must see every committed outbox row once, in commit order per key,
// whatever the publisher went through.

// eosArgs are run's flags for exactly-once with this test's own progress
// topic and transactional id.
func eosArgs(t *testing.T, w *world, extra ...string) []string {
	t.Helper()
	return append([]string{"--delivery", "exactly-once", "--progress-topic", w.topic + ".progress",
		"--transaction-interval", "50ms"}, extra...)
}

var readCommitted = kgo.FetchIsolationLevel(kgo.ReadCommitted())

// requireExactlyOnce reads the topic with read_committed isolation until
// every id in want arrived and checks each arrived once and, per key, in
// id order (the writers commit each key's rows in id order).
func requireExactlyOnce(t *testing.T, w *world, want []int64) txnLog {
	t.Helper()
	count, _ := w.consumeAll(t, want, 2*time.Minute, readCommitted)
	dups := 0
	for id, n := range count {
		if n != 1 {
			dups++
			t.Errorf("outbox id %d seen %d times by a read_committed consumer", id, n)
		}
	}
	if len(count) != len(want) {
		t.Errorf("read_committed consumer saw %d distinct ids, want %d", len(count), len(want))
	}
	log := w.committedLog(t)
	for key, ids := range log.byKey {
		if !slices.IsSorted(ids) {
			t.Errorf("key %s: ids out of commit order for a read_committed consumer: %v", key, ids)
		}
	}
	t.Logf("measured: %d rows, %d duplicates for read_committed; read_uncommitted also saw %d records of aborted transactions, %d committed, %d in no finished transaction",
		len(want), dups, log.aborted, log.committed, log.open)
	if log.committed != len(want) {
		t.Errorf("read_uncommitted consumer: %d records in committed transactions, want %d", log.committed, len(want))
	}
	if log.open != 0 || log.nonTransactional != 0 {
		t.Errorf("read_uncommitted consumer: %d records in no finished transaction, %d outside any: each must end committed or aborted", log.open, log.nonTransactional)
	}
	return log
}

// txnLog is the topic as a read_uncommitted consumer sees it, with each
// record placed in its transaction by the control records that end them.
type txnLog struct {
	committed, aborted, open, nonTransactional int
	byKey                                      map[string][]int64 // ids of committed records, in offset order
}

// committedLog reads the topic to its end with read_uncommitted isolation
// and the control records kept.
func (w *world) committedLog(t *testing.T) txnLog {
	t.Helper()
	brokers := strings.Split(w.brokers, ",")
	ends, err := testenv.Admin(t, brokers).ListEndOffsets(t.Context(), w.topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(w.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type pending struct {
		key string
		id  int64
	}
	l := txnLog{byKey: map[string][]int64{}}
	open := map[int32]map[int64][]pending{} // partition, producer id: records of its open transaction
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for len(want) > 0 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if open[r.Partition] == nil {
				open[r.Partition] = map[int64][]pending{}
			}
			txn := open[r.Partition]
			switch {
			case r.Attrs.IsControl():
				// The key of a control record: version, then type (0 abort,
				// 1 commit), each a big-endian int16.
				if len(r.Key) < 4 {
					t.Errorf("control record with a %d-byte key", len(r.Key))
					return
				}
				recs := txn[r.ProducerID]
				delete(txn, r.ProducerID)
				if binary.BigEndian.Uint16(r.Key[2:4]) == 1 {
					l.committed += len(recs)
					for _, p := range recs {
						l.byKey[p.key] = append(l.byKey[p.key], p.id)
					}
				} else {
					l.aborted += len(recs)
				}
			case !r.Attrs.IsTransactional():
				l.nonTransactional++
			default:
				var id int64
				for _, h := range r.Headers {
					if h.Key == "id" {
						id, _ = strconv.ParseInt(string(h.Value), 10, 64)
					}
				}
				txn[r.ProducerID] = append(txn[r.ProducerID], pending{key: string(r.Key), id: id})
			}
		})
	}
	if len(want) > 0 {
		t.Fatalf("read_uncommitted consumer did not reach the end of partitions %v", want)
	}
	for _, txns := range open {
		for _, recs := range txns {
			l.open += len(recs)
		}
	}
	return l
}

// TestExactlyOnceUnderKill9SIGTERMAndWalsenderKills: kill -9 mid-stream,
// a walsender terminated, SIGTERM; a read_committed consumer sees every row
// once, and every extra record a read_uncommitted one sees is in an aborted
// transaction.
func TestExactlyOnceUnderKill9SIGTERMAndWalsenderKills(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	adm := testenv.Admin(t, strings.Split(w.brokers, ","))
	var want []int64
	for round, fault := range []string{"kill9", "walsender+sigterm", "kill9", "kill9-streaming"} {
		// Killed with a transaction open (a long one, so that it is open
		// when the kill comes, however slow the machine): its records are
		// in Kafka, and must show as aborted.
		args := eosArgs(t, w, "--transaction-interval", "20s")
		if fault == "kill9-streaming" {
			// Killed while committing every 50 ms: the last transactions
			// committed are not confirmed to the slot yet, so the next
			// process gets them again and must skip them.
			args = eosArgs(t, w)
		}
		p := w.start(t, args...)
		waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })
		var ids []int64
		var werr error
		written := make(chan struct{})
		killed := make(chan struct{})
		go func() {
			defer close(written)
			if fault != "kill9-streaming" {
				ids, werr = w.tryWrite(t.Context(), 200, round*10000)
				return
			}
			// Still writing when killed, and after: the next process has
			// rows of its own to commit besides those it must skip.
			for i := 0; werr == nil; i++ {
				var more []int64
				more, werr = w.tryWrite(t.Context(), 50, round*10000+i*250)
				ids = append(ids, more...)
				select {
				case <-killed:
					if i%8 == 7 {
						return
					}
				default:
				}
			}
		}()
		if fault == "kill9-streaming" {
			// Past the producer's start (fencing, reading the progress
			// topic), into steady commits.
			time.Sleep(time.Second)
			waitFor(t, 30*time.Second, "producer ready", func() bool { return strings.Contains(p.log(), "exactly-once producer ready") })
		}
		if fault == "kill9" {
			// Issue 49, item 30: a fixed sleep before the kill found no
			// transaction open on a loaded machine (the rows had not
			// reached Kafka yet), and the test then said it had not
			// tested what it tests. It waits for one.
			waitFor(t, 2*time.Minute, "a Kafka transaction open with records in it", func() bool { return w.openTransaction(t, adm) })
		} else {
			time.Sleep(time.Duration(300+round*100) * time.Millisecond)
		}
		switch fault {
		case "kill9", "kill9-streaming":
			p.kill(t)
			close(killed)
			<-written
		default:
			w.terminateWalsender(t)
			<-written
			waitFor(t, 30*time.Second, "reconnect", func() bool { return strings.Count(p.log(), "msg=streaming") >= 2 })
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, time.Minute); code != 0 {
				t.Fatalf("exit code %d after SIGTERM; log:\n%s", code, p.log())
			}
		}
		if werr != nil {
			t.Fatal(werr)
		}
		want = append(want, ids...)
	}
	p := w.start(t, eosArgs(t, w, "--metrics-addr", anyPort)...)
	addr := servedAt(t, p.log)
	if log := requireExactlyOnce(t, w, want); log.aborted == 0 {
		t.Errorf("no record of an aborted transaction after two kill -9 with a transaction open: the test did not test it")
	}
	_, body := get(addr, "/metrics")
	if n := metric(body, w.slot, "outboxd_kafka_transactions_total"); n < 1 {
		t.Errorf("outboxd_kafka_transactions_total = %v after publishing, want at least 1", n)
	}
	if n := metric(body, w.slot, "outboxd_skipped_records_total"); n < 0 {
		t.Errorf("outboxd_skipped_records_total missing from /metrics")
	}
	p.stop(t)
}

// TestExactlyOnceZombieIsFenced: the active publisher is stopped (SIGSTOP)
// with a Kafka transaction open, its walsender goes, the standby takes the
// slot over; when the old one wakes (SIGCONT), it exits non-zero saying it
// was fenced, and nothing it held is visible twice.
func TestExactlyOnceZombieIsFenced(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// A long interval keeps the zombie's transaction open while it writes.
	zombie := w.start(t, eosArgs(t, w, "--transaction-interval", "2s")...)
	want := w.write(t, 2, 0)
	w.consumeAll(t, want, time.Minute, readCommitted)
	standby := w.start(t, eosArgs(t, w, "--slot-retry-interval", "100ms")...)
	waitFor(t, 30*time.Second, "standby logs the busy slot", func() bool { return strings.Contains(standby.log(), "in use by another process") })

	want = append(want, w.write(t, 20, 100)...) // into the zombie's open transaction
	time.Sleep(300 * time.Millisecond)
	if err := zombie.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	w.terminateWalsender(t) // as wal_sender_timeout would
	want = append(want, w.write(t, 20, 200)...)
	waitFor(t, time.Minute, "standby takes over", func() bool { return strings.Contains(standby.log(), "exactly-once producer ready") })
	if err := zombie.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := zombie.wait(t, time.Minute); code == 0 {
		t.Errorf("the fenced publisher exited 0; log:\n%s", zombie.log())
	}
	if !strings.Contains(zombie.log(), "fenced by another outboxd process") {
		t.Errorf("the fenced publisher does not say it was fenced; log:\n%s", zombie.log())
	}
	want = append(want, w.write(t, 5, 300)...)
	requireExactlyOnce(t, w, want)
	standby.stop(t)
}

// openTransaction reports whether the topic holds records of a Kafka
// transaction still open: a partition's end (high watermark) is past the
// last offset read_committed consumers may read (its last stable offset).
func (w *world) openTransaction(t *testing.T, adm *kadm.Client) bool {
	t.Helper()
	ends, err := adm.ListEndOffsets(t.Context(), w.topic)
	if err != nil {
		t.Fatal(err)
	}
	stable, err := adm.ListCommittedOffsets(t.Context(), w.topic)
	if err != nil {
		t.Fatal(err)
	}
	open := false
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := stable.Lookup(o.Topic, o.Partition); ok && o.Offset > s.Offset {
			open = true
		}
	})
	return open
}

// terminateWalsender ends the slot's walsender from the server side.
func (w *world) terminateWalsender(t *testing.T) {
	t.Helper()
	var n int
	err := w.pool.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots
		WHERE slot_name = $1 AND database = current_database() AND active_pid IS NOT NULL`, w.slot).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("terminated %d walsenders, want 1", n)
	}
}

// TestExactlyOnceLargeTransactionResumesInsideIt: one PostgreSQL
// transaction of 200,000 rows spans many Kafka transactions; kill -9 after
// a few of them committed, restart: the slot gives the whole transaction
// again (it was never confirmed), and the new publisher must skip exactly
// the records up to the committed (commit LSN, index), since every record
// of it shares one commit LSN. Memory stays bounded.
func TestExactlyOnceLargeTransactionResumesInsideIt(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(t, eosArgs(t, w, "--metrics-addr", anyPort)...)
	addr := servedAt(t, p.log)
	waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })
	const n = 200_000
	var lo, hi int64
	if err := w.pool.QueryRow(t.Context(), `WITH ins AS (INSERT INTO outbox (aggregate_id, topic, payload)
		SELECT ('00000000-0000-4000-8000-' || lpad((g % 100)::text, 12, '0'))::uuid, $1, jsonb_build_object('n', g, 'pad', repeat('x', 180))
		FROM generate_series(1, $2::int) g RETURNING id) SELECT min(id), max(id) FROM ins`, w.topic, n).Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	if hi-lo+1 != n {
		t.Fatalf("ids %d..%d are not %d consecutive ids", lo, hi, n)
	}
	waitFor(t, 2*time.Minute, "a few Kafka transactions of the large one committed", func() bool {
		_, body := get(addr, "/metrics")
		return metric(body, w.slot, "outboxd_kafka_transactions_total") >= 3
	})
	peak, err := procstat.PeakRSS(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if peak > 200<<20 {
		t.Errorf("publisher peak RSS %d MiB: the transaction is being held in memory", peak>>20)
	}
	p.kill(t)

	p2 := w.start(t, eosArgs(t, w, "--metrics-addr", anyPort)...)
	addr2 := servedAt(t, p2.log)
	want := make([]int64, 0, n)
	for id := lo; id <= hi; id++ {
		want = append(want, id)
	}
	requireExactlyOnce(t, w, want)
	_, body := get(addr2, "/metrics")
	skipped := metric(body, w.slot, "outboxd_skipped_records_total")
	t.Logf("measured: 200,000-row transaction, kill -9 inside it: the restarted publisher skipped %.0f records a committed Kafka transaction held", skipped)
	if skipped < 1 {
		t.Errorf("outboxd_skipped_records_total = %v: the restart skipped nothing, so the test did not resume inside the transaction", skipped)
	}
	p2.stop(t)
}

// TestExactlyOnceTransactionTimeout: a publisher stopped (SIGSTOP) with a
// Kafka transaction open for longer than --transaction-timeout finds it
// aborted by the coordinator when it wakes: it must stop with exit 1 and
// say so, and the next start must resume exactly.
func TestExactlyOnceTransactionTimeout(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(t, eosArgs(t, w, "--transaction-interval", "1s", "--transaction-timeout", "2s")...)
	want := w.write(t, 2, 0)
	w.consumeAll(t, want, time.Minute, readCommitted)
	want = append(want, w.write(t, 10, 100)...) // into an open transaction
	time.Sleep(200 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The coordinator looks for timed-out transactions every 10 s
	// (transaction.abort.timed.out.transaction.cleanup.interval.ms).
	time.Sleep(15 * time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t, time.Minute)
	t.Logf("measured: after its transaction timed out, the publisher exited %d: %s", code, lastLine(p.log()))
	if code == 0 {
		t.Errorf("the publisher whose transaction Kafka aborted exited 0; log:\n%s", p.log())
	}
	if !strings.Contains(p.log(), "--transaction-timeout") {
		t.Errorf("the publisher does not say its transaction may have timed out; log:\n%s", p.log())
	}
	p2 := w.start(t, eosArgs(t, w)...)
	requireExactlyOnce(t, w, want)
	p2.stop(t)
}

// kill sends SIGKILL (kill -9) and waits for the process to exit.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(t, time.Minute)
}

// stop sends SIGTERM and expects exit code 0.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM; log:\n%s", code, p.log())
	}
}

// TestExactlyOnceRefusedRecordStopsNamingIt: a record refused for good
// (by Kafka: its topic does not exist; by outboxd: over --max-record-bytes)
// stops the run with exit 1, and the error names the record, not just that
// the sink was told to abort (the first version reported "abort requested"
// when outboxd refused the record itself).
func TestExactlyOnceRefusedRecordStopsNamingIt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, topic, payload string
		say                  string
	}{
		{"unknown topic", "-missing", `{}`, "Kafka transaction aborted"},
		{"too large", "", `{"pad": "` + strings.Repeat("x", 2000) + `"}`, "record too large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			p := w.start(t, eosArgs(t, w, "--max-record-bytes", "1024")...)
			want := w.write(t, 2, 0)
			w.consumeAll(t, want, time.Minute, readCommitted)
			topic := w.topic + tt.topic
			var id int64
			if err := w.pool.QueryRow(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload)
				VALUES ('00000000-0000-4000-8000-000000000001', $1, $2::jsonb) RETURNING id`, topic, tt.payload).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, 2*time.Minute); code != exitError {
				t.Fatalf("exit code %d, want %d; log:\n%s", code, exitError, p.log())
			}
			last := lastLine(p.log())
			for _, s := range []string{"outbox id " + strconv.FormatInt(id, 10), topic, tt.say} {
				if !strings.Contains(last, s) {
					t.Errorf("the final error does not name %q:\n%s", s, last)
				}
			}
		})
	}
}
