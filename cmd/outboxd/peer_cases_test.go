package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/outbox"
)

// Issue 37: two cases from peers' bug trackers, end to end, in both
// delivery modes, under kill -9 and under SIGTERM, with writers
// committing all along.

// TestRowsSharingACommitLSNSurviveRestarts guards against Debezium's
// data-loss bug debezium/dbz#1554 (fixed by debezium/debezium#7531): when
// several events share one LSN, the connector marked the LSN processed
// after the first, and on restart skipped the rest. Here every row of a
// transaction shares its commit LSN, and only (commit LSN, index) tells
// them apart. Transactions of 50 to 500 rows, the publisher stopped
// mid-stream four times while a writer commits: nothing lost; after
// SIGTERM nothing twice; after kill -9 every duplicate carries the same id
// and payload, and for exactly-once a read_committed consumer sees none.
func TestRowsSharingACommitLSNSurviveRestarts(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	runPeerCases(t, peerOpts{})
}

// TestTableLessEventsMixedWithRowsSurviveRestarts guards against
// Debezium's bug debezium/dbz#2004 (debezium/debezium#7492, reverted in
// #7524, again in #7653): after a restart, events of
// pg_logical_emit_message(true, ...) were published twice, the resume
// logic treating a transactional message like a non-transactional one.
// outboxd_emit events (--message-prefix) interleaved with outbox rows in
// the same transactions, under the same keys: nothing lost; after SIGTERM
// nothing twice; after kill -9 duplicates carry the same id header (the
// message's LSN), and for exactly-once a read_committed consumer sees
// none. Per key, rows and messages arrive in commit order.
func TestTableLessEventsMixedWithRowsSurviveRestarts(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	runPeerCases(t, peerOpts{messages: true})
}

// TestHeartbeatsMixedIntoTheStreamSurviveRestarts: issue 51, a peer's bug
// (a Debezium release missed a non-transactional logical message between
// transactions across a restart). outboxd's own heartbeat, a
// non-transactional pg_logical_emit_message every 10 ms, goes through the
// stream between the transactions of rows and outboxd_emit events (pgoutput
// sends messages because --message-prefix asks for them; the decoder ignores
// the heartbeat's prefix): the same checks as above.
func TestHeartbeatsMixedIntoTheStreamSurviveRestarts(t *testing.T) {
	t.Parallel()
	testenv.Core(t)
	runPeerCases(t, peerOpts{messages: true, heartbeats: true})
}

// peerOpts are the variants of the restart scenario: messages mixes
// outboxd_emit events into every transaction, heartbeats runs outboxd with
// --heartbeat-interval 10ms.
type peerOpts struct{ messages, heartbeats bool }

// runPeerCases runs the restart scenario over (delivery mode, fault).
func runPeerCases(t *testing.T, o peerOpts) {
	for _, tt := range []struct {
		mode, fault string
	}{
		{"at-least-once", "kill9"},
		{"at-least-once", "sigterm"},
		{"exactly-once", "kill9"},
		{"exactly-once", "sigterm"},
	} {
		t.Run(tt.mode+"/"+tt.fault, func(t *testing.T) {
			t.Parallel()
			peerRestarts(t, tt.mode, tt.fault, o)
		})
	}
}

const (
	peerRounds       = 4  // publishers stopped mid-stream
	peerTxnsPerRound = 12 // transactions committed (over all writers) while each publisher runs, at least
	// peerMaxAhead bounds the writing by the publishing: the writers wait
	// while this many of their transactions are past the slot's confirmed
	// position. However slow the machine, they never run dry before a
	// round (a fixed budget did, issue 49, item 30), nor write without
	// bound while no publisher runs.
	peerMaxAhead = 24
)

func peerRestarts(t *testing.T, mode, fault string, o peerOpts) {
	withMessages := o.messages
	w := newWorld(t)
	eos := mode == "exactly-once"
	args := func(extra ...string) []string {
		a := []string{"--delivery", mode}
		if withMessages {
			a = append(a, "--message-prefix", "outboxd.event")
		}
		if o.heartbeats {
			a = append(a, "--heartbeat-interval", "10ms")
		}
		if eos {
			// At most 150 records in flight (in this mode acknowledged at
			// the Kafka commit), and a Kafka transaction commits at 97: it
			// ends inside most PostgreSQL transactions (50 to 500 events),
			// so a kill -9 leaves a committed position in the middle of
			// one, which the slot sends again whole.
			a = eosArgs(t, w, append(a, "--max-in-flight-records", "150", "--transaction-max-records", "97")...)
		}
		return append(a, extra...)
	}
	// Where each exactly-once publisher resumed. A position whose index
	// is not the last of any transaction size is inside a transaction:
	// its first events are in a committed Kafka transaction, the rest not.
	var resumes []string
	inside := 0
	noteResume := func(p *proc) {
		if m := resumeAfter.FindStringSubmatch(p.log()); m != nil {
			resumes = append(resumes, m[1])
			if i, _ := strconv.Atoi(m[2]); i > 0 && !slices.Contains(peerTxnSizes, i+1) {
				inside++
			}
		}
	}
	tw := startTxnWriters(t, w, 2, withMessages)
	skipped := 0.0
	for round := range peerRounds {
		p := w.start(t, args("--metrics-addr", anyPort)...)
		addr := servedAt(t, p.log)
		// A SIGTERM before the runtime installed the handler takes the
		// default action; that is not the graceful stop under test.
		waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })
		from := tw.txns()
		start := w.confirmedLSN(t)
		waitFor(t, time.Minute, "transactions committed while the publisher runs", func() bool {
			return tw.txns() >= from+peerTxnsPerRound || tw.failed() != nil
		})
		if err := tw.failed(); err != nil {
			t.Fatal(err)
		}
		// The publisher has confirmed some of them: it is mid-stream, with
		// more in flight behind what it confirmed.
		waitFor(t, time.Minute, "the slot confirmed past its position at the start", func() bool { return w.confirmedLSN(t) != start })
		_, body := get(addr, "/metrics")
		if eos {
			if n := metric(body, w.slot, "outboxd_skipped_records_total"); n > 0 {
				skipped += n
			}
		}
		if n := metric(body, w.slot, "outboxd_heartbeats_total"); o.heartbeats && n <= 0 {
			t.Errorf("round %d: no heartbeat written (outboxd_heartbeats_total %v): the test did not test it", round, n)
		}
		// Stop it just after a writer committed, a little later each round:
		// that transaction is on its way through the publisher.
		tw.waitCommit(t)
		time.Sleep(time.Duration(round*5) * time.Millisecond)
		switch fault {
		case "kill9":
			p.kill(t)
		case "sigterm":
			p.stop(t)
		}
		noteResume(p)
	}
	want := tw.halt(t)
	var walEnd string
	if err := w.pool.QueryRow(t.Context(), `SELECT pg_current_wal_lsn()::text`).Scan(&walEnd); err != nil {
		t.Fatal(err)
	}
	// The last publisher catches up, stops gracefully, and one more start
	// must send nothing again.
	p := w.start(t, args()...)
	// Streaming first: the slot may be past walEnd already (a SIGTERM
	// drains), and a SIGTERM before the handler is installed kills.
	waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })
	waitSlotPast(t, w, walEnd)
	p.stop(t)
	noteResume(p)
	p = w.start(t, args()...)
	waitFor(t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.log(), "msg=streaming") })

	var opts []kgo.Opt
	if eos {
		opts = append(opts, readCommitted)
	}
	got := consumeByIDHeader(t, w, want, 2*time.Minute, opts...)
	p.stop(t)

	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
	}
	dups := 0
	for id, vals := range got.values {
		if !wanted[id] {
			t.Errorf("record with id %q, which no committed transaction holds (%d times)", id, len(vals))
		}
		dups += len(vals) - 1
		for _, v := range vals[1:] {
			if v != vals[0] {
				t.Errorf("id %s sent again with another value: %s vs %s", id, v, vals[0])
			}
		}
	}
	if got.noID > 0 {
		t.Errorf("%d records without an id header", got.noID)
	}
	lost := 0
	for _, id := range want {
		if len(got.values[id]) == 0 {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d events lost", lost, len(want))
	}
	if (fault == "sigterm" || eos) && dups > 0 {
		t.Errorf("%d duplicates after %d %s restarts with --delivery %s, want 0", dups, peerRounds, fault, mode)
	}
	checkSeqOrder(t, got.seqByKey, eos || fault == "sigterm")
	if eos {
		log := w.committedLog(t)
		if log.committed != len(want) {
			t.Errorf("read_uncommitted consumer: %d records in committed Kafka transactions, want %d", log.committed, len(want))
		}
		if log.open != 0 || log.nonTransactional != 0 {
			t.Errorf("read_uncommitted consumer: %d records in no finished transaction, %d outside any", log.open, log.nonTransactional)
		}
		t.Logf("measured: read_uncommitted also saw %d records of aborted transactions; restarted publishers skipped %.0f records a committed Kafka transaction held; resumed after %v",
			log.aborted, skipped, resumes)
		if fault == "kill9" && inside == 0 {
			t.Errorf("no publisher resumed inside a transaction (resumed after %v): the test did not test it", resumes)
		}
	}
	t.Logf("measured: %d transactions (%d events: rows%s), %d %s restarts with --delivery %s: %d lost, %d duplicates",
		tw.txns(), len(want), map[bool]string{true: " and messages", false: ""}[withMessages], peerRounds, fault, mode, lost, dups)
}

// resumeAfter matches the exactly-once producer's start line: the position
// (commit LSN#index) it resumes after.
var resumeAfter = regexp.MustCompile(`exactly-once producer ready.* resume_after=(\S+#(\d+))`)

// waitSlotPast waits until the slot confirmed lsn or later.
func waitSlotPast(t *testing.T, w *world, lsn string) {
	t.Helper()
	waitFor(t, 2*time.Minute, "the slot confirmed up to "+lsn, func() bool {
		var ok bool
		err := w.pool.QueryRow(t.Context(), `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, w.slot, lsn).Scan(&ok)
		return err == nil && ok
	})
}

// txnWriters commit transactions of 50 to 500 events, every event of one
// transaction sharing its commit LSN, until halted, never more than
// peerMaxAhead past what the slot confirmed.
// Each writer has keys of its own and numbers its events (the payload's
// "seq"), so per key the seq order is the commit order. With messages,
// a transaction alternates chunks of outbox rows and outboxd_emit events
// under the same keys.
type txnWriters struct {
	mu      sync.Mutex
	ids     []string     // committed: outbox ids, and message LSNs
	n       int          // transactions committed
	ends    []outbox.LSN // the WAL position after each commit the slot has not confirmed
	err     error
	stopped atomic.Bool
	wg      sync.WaitGroup
}

var peerTxnSizes = []int{50, 500, 120, 333, 75, 260, 480, 199}

func startTxnWriters(t *testing.T, w *world, writers int, withMessages bool) *txnWriters {
	t.Helper()
	tw := &txnWriters{}
	for wr := range writers {
		tw.wg.Add(1)
		go func() {
			defer tw.wg.Done()
			// Not t.Context(): a statement is never cancelled, so halt
			// returns with every commit's outcome known.
			ctx := context.Background()
			seq := 0
			for i := 0; !tw.stopped.Load(); i++ {
				if err := tw.pace(ctx, w); err != nil {
					tw.fail(fmt.Errorf("writer %d: %w", wr, err))
					return
				}
				if tw.stopped.Load() {
					return
				}
				size := peerTxnSizes[(i+wr*3)%len(peerTxnSizes)]
				var ids []string
				err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
					ids = ids[:0]
					s := seq
					chunks := 1
					if withMessages {
						chunks = 4 // rows, messages, rows, messages
					}
					for c := range chunks {
						n := size / chunks
						if c == chunks-1 {
							n = size - (chunks-1)*(size/chunks)
						}
						q := `INSERT INTO outbox (aggregate_id, topic, payload)
							SELECT ('00000000-0000-4000-8000-' || lpad(($1::int * 10 + g % 3)::text, 12, '0'))::uuid, $2, jsonb_build_object('seq', $3::int + g)
							FROM generate_series(0, $4::int - 1) g RETURNING id::text`
						if c%2 == 1 {
							q = `SELECT outboxd_emit($2, jsonb_build_object('seq', $3::int + g),
								'00000000-0000-4000-8000-' || lpad(($1::int * 10 + g % 3)::text, 12, '0'))::text
							FROM generate_series(0, $4::int - 1) g`
						}
						rows, err := tx.Query(ctx, q, 100+wr, w.topic, s, n)
						if err != nil {
							return err
						}
						got, err := pgx.CollectRows(rows, pgx.RowTo[string])
						if err != nil {
							return err
						}
						ids = append(ids, got...)
						s += n
					}
					return nil
				})
				if err != nil {
					tw.fail(fmt.Errorf("writer %d, transaction %d: %w", wr, i, err))
					return
				}
				var end string
				if err := w.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
					tw.fail(fmt.Errorf("writer %d, transaction %d: %w", wr, i, err))
					return
				}
				lsn, err := outbox.ParseLSN(end)
				if err != nil {
					tw.fail(err)
					return
				}
				seq += size
				tw.mu.Lock()
				tw.ids = append(tw.ids, ids...)
				tw.ends = append(tw.ends, lsn)
				tw.n++
				tw.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	t.Cleanup(func() { tw.stopped.Store(true); tw.wg.Wait() })
	return tw
}

func (tw *txnWriters) txns() int { tw.mu.Lock(); defer tw.mu.Unlock(); return tw.n }

func (tw *txnWriters) fail(err error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.err == nil {
		tw.err = err
	}
}

// pace waits while peerMaxAhead transactions or more are past the slot's
// confirmed position (or until halted).
func (tw *txnWriters) pace(ctx context.Context, w *world) error {
	for !tw.stopped.Load() {
		var confirmed string
		if err := w.pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&confirmed); err != nil {
			return fmt.Errorf("reading the slot's confirmed position: %w", err)
		}
		lsn, err := outbox.ParseLSN(confirmed)
		if err != nil {
			return err
		}
		// The confirmed position never goes back: what it passed is
		// forgotten.
		tw.mu.Lock()
		tw.ends = slices.DeleteFunc(tw.ends, func(e outbox.LSN) bool { return e <= lsn })
		ahead := len(tw.ends)
		tw.mu.Unlock()
		if ahead < peerMaxAhead {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// waitCommit waits until a writer commits one more transaction.
func (tw *txnWriters) waitCommit(t *testing.T) {
	t.Helper()
	n := tw.txns()
	for deadline := time.Now().Add(time.Minute); tw.txns() == n; time.Sleep(time.Millisecond) {
		if err := tw.failed(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transaction committed within a minute")
		}
	}
}

func (tw *txnWriters) failed() error { tw.mu.Lock(); defer tw.mu.Unlock(); return tw.err }

// halt stops the writers and returns the ids of every committed event.
func (tw *txnWriters) halt(t *testing.T) []string {
	t.Helper()
	tw.stopped.Store(true)
	tw.wg.Wait()
	if err := tw.failed(); err != nil {
		t.Fatal(err)
	}
	return slices.Clone(tw.ids)
}

// peerRecords is what a consumer saw, by the id header.
type peerRecords struct {
	values   map[string][]string // id: the value of each copy, in arrival order
	seqByKey map[string][]int    // key: the payload's seq of each record, in offset order
	noID     int
}

// consumeByIDHeader reads the topic from the start until every id in want
// (the id header as text: an outbox id or a message LSN) arrived, plus a
// quiet period.
func consumeByIDHeader(t *testing.T, w *world, want []string, d time.Duration, opts ...kgo.Opt) peerRecords {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(w.brokers, ",")...), kgo.ConsumeTopics(w.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := peerRecords{values: map[string][]string{}, seqByKey: map[string][]int{}}
	missing := len(want)
	pending := map[string]bool{}
	for _, id := range want {
		pending[id] = true
	}
	deadline := time.Now().Add(d)
	var quietUntil time.Time
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			id := recordHeader(r, "id")
			if id == "" {
				got.noID++
				return
			}
			got.values[id] = append(got.values[id], string(r.Value))
			if pending[id] {
				delete(pending, id)
				missing--
			}
			var v struct{ Seq *int }
			if err := json.Unmarshal(r.Value, &v); err != nil || v.Seq == nil {
				t.Errorf("id %s: value %q has no seq", id, r.Value)
				return
			}
			got.seqByKey[string(r.Key)] = append(got.seqByKey[string(r.Key)], *v.Seq)
		})
		if missing == 0 {
			if quietUntil.IsZero() {
				quietUntil = time.Now().Add(2 * time.Second)
			} else if time.Now().After(quietUntil) {
				return got
			}
		}
	}
	t.Errorf("%d of %d ids never arrived within %s", missing, len(want), d)
	return got
}

// checkSeqOrder reports every key whose records are not in commit order.
// strict: each seq once, increasing; otherwise, as with redeliveries after
// kill -9, a seq may come again later, but nothing may come before what
// its key committed first.
func checkSeqOrder(t *testing.T, seqByKey map[string][]int, strict bool) {
	t.Helper()
	for key, seqs := range seqByKey {
		seen := map[int]bool{}
		last := -1
		for _, s := range seqs {
			if seen[s] {
				if strict {
					t.Errorf("key %s: seq %d twice", key, s)
					return
				}
				continue
			}
			seen[s] = true
			if s < last {
				t.Errorf("key %s: seq %d first seen after seq %d", key, s, last)
				return
			}
			last = s
		}
	}
}
