package checkpoint

import (
	"math/rand/v2"
	"testing"
	"time"
)

// step is one operation on a Tracker in a table test.
type step struct {
	op      string // begin, add, ack, commit, idle
	txn     Txn
	lsn     LSN
	wantErr bool
	flushed LSN // expected Flushed() after the step
}

func TestTracker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		start LSN
		steps []step
	}{
		{"empty transaction confirms at commit", 10, []step{
			{op: "begin", txn: 1, flushed: 10},
			{op: "commit", txn: 1, lsn: 20, flushed: 20},
		}},
		{"record pending holds the watermark", 0, []step{
			{op: "begin", txn: 1},
			{op: "add", txn: 1},
			{op: "commit", txn: 1, lsn: 20},
			{op: "ack", txn: 1, flushed: 20},
		}},
		{"ack before commit waits for commit", 0, []step{
			{op: "begin", txn: 1},
			{op: "add", txn: 1},
			{op: "ack", txn: 1},
			{op: "commit", txn: 1, lsn: 20, flushed: 20},
		}},
		{"later transaction acked first does not pass the earlier one", 5, []step{
			{op: "begin", txn: 1, flushed: 5},
			{op: "add", txn: 1, flushed: 5},
			{op: "commit", txn: 1, lsn: 20, flushed: 5},
			{op: "begin", txn: 2, flushed: 5},
			{op: "add", txn: 2, flushed: 5},
			{op: "add", txn: 2, flushed: 5},
			{op: "commit", txn: 2, lsn: 30, flushed: 5},
			{op: "ack", txn: 2, flushed: 5},
			{op: "ack", txn: 2, flushed: 5},
			{op: "ack", txn: 1, flushed: 30},
		}},
		{"partially acked transaction holds", 0, []step{
			{op: "begin", txn: 1},
			{op: "add", txn: 1},
			{op: "add", txn: 1},
			{op: "commit", txn: 1, lsn: 20},
			{op: "ack", txn: 1},
			{op: "begin", txn: 2},
			{op: "commit", txn: 2, lsn: 30},
			{op: "ack", txn: 1, flushed: 30},
		}},
		{"idle advances only when nothing is queued", 0, []step{
			{op: "idle", lsn: 100, flushed: 100},
			{op: "begin", txn: 1, flushed: 100},
			{op: "idle", lsn: 200, flushed: 100},
			{op: "add", txn: 1, flushed: 100},
			{op: "commit", txn: 1, lsn: 150, flushed: 100},
			{op: "idle", lsn: 200, flushed: 100},
			{op: "ack", txn: 1, flushed: 150},
			{op: "idle", lsn: 200, flushed: 200},
			{op: "idle", lsn: 180, flushed: 200},
		}},
		{"misuse is an error", 0, []step{
			{op: "ack", txn: 1, wantErr: true},
			{op: "begin", txn: 1},
			{op: "ack", txn: 1, wantErr: true},
			{op: "commit", txn: 1, lsn: 20, flushed: 20},
			{op: "add", txn: 1, wantErr: true, flushed: 20},
			{op: "commit", txn: 1, lsn: 30, wantErr: true, flushed: 20},
			{op: "begin", txn: 2, flushed: 20},
			{op: "commit", txn: 2, lsn: 20, wantErr: true, flushed: 20},
			{op: "commit", txn: 7, lsn: 50, wantErr: true, flushed: 20},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := New(tt.start)
			for i, s := range tt.steps {
				var err error
				switch s.op {
				case "begin":
					if got := tr.Begin(); got != s.txn {
						t.Fatalf("step %d: Begin = %d, want %d", i, got, s.txn)
					}
				case "add":
					err = tr.Add(s.txn)
				case "ack":
					err = tr.Ack(s.txn)
				case "commit":
					err = tr.Commit(s.txn, s.lsn, time.Unix(int64(s.lsn), 0))
				case "idle":
					tr.Idle(s.lsn)
				}
				if (err != nil) != s.wantErr {
					t.Fatalf("step %d (%s %d): err = %v, wantErr %v", i, s.op, s.txn, err, s.wantErr)
				}
				if got := tr.Flushed(); got != s.flushed {
					t.Fatalf("step %d (%s %d): Flushed = %s, want %s", i, s.op, s.txn, got, s.flushed)
				}
			}
		})
	}
}

// TestTrackerOutOfOrderAcks checks the invariant against a model over many
// random interleavings: after every step, Flushed equals the end of the
// longest fully acknowledged, committed prefix of transactions.
func TestTrackerOutOfOrderAcks(t *testing.T) {
	t.Parallel()
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		tr := New(0)
		type rec struct{ txn, idx int }
		nTx := 1 + rng.IntN(30)
		sizes := make([]int, nTx)
		acked := make([]int, nTx)
		ids := make([]Txn, nTx) // an empty transaction's Txn may be handed out again (coalesce)
		var unacked []rec
		for i := range sizes {
			x := tr.Begin()
			ids[i] = x
			sizes[i] = rng.IntN(5)
			for j := 0; j < sizes[i]; j++ {
				if err := tr.Add(x); err != nil {
					t.Fatal(err)
				}
				unacked = append(unacked, rec{i, j})
			}
			if err := tr.Commit(x, LSN((i+1)*100), time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		model := func() LSN {
			var w LSN
			for i := range sizes {
				if acked[i] < sizes[i] {
					break
				}
				w = LSN((i + 1) * 100)
			}
			return w
		}
		if got, want := tr.Flushed(), model(); got != want {
			t.Fatalf("seed %d before acks: Flushed = %s, want %s", seed, got, want)
		}
		rng.Shuffle(len(unacked), func(i, j int) { unacked[i], unacked[j] = unacked[j], unacked[i] })
		for _, r := range unacked {
			if err := tr.Ack(ids[r.txn]); err != nil {
				t.Fatal(err)
			}
			acked[r.txn]++
			if got, want := tr.Flushed(), model(); got != want {
				t.Fatalf("seed %d after ack of txn %d: Flushed = %s, want %s", seed, r.txn+1, got, want)
			}
		}
		if recs, txns := tr.InFlight(); recs != 0 || txns != 0 {
			t.Fatalf("seed %d: InFlight = %d records, %d txns after all acks", seed, recs, txns)
		}
	}
}

func BenchmarkTrackerSmallTransactions(b *testing.B) {
	tr := New(0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		x := tr.Begin()
		_ = tr.Add(x)
		_ = tr.Commit(x, LSN(i+1), time.Time{})
		_ = tr.Ack(x)
	}
}

// The commit time that goes with the watermark is that of the newest
// transaction it passed, not of the newest acknowledged one: the recovery
// predicate of a lost slot starts from it.
func TestFlushedCommitTimeFollowsTheWatermark(t *testing.T) {
	tr := New(10)
	t1, t2 := time.Unix(100, 0), time.Unix(200, 0)
	a := tr.Begin()
	_ = tr.Add(a)
	_ = tr.Commit(a, 20, t1)
	b := tr.Begin()
	_ = tr.Add(b)
	_ = tr.Commit(b, 30, t2)
	if err := tr.Ack(b); err != nil {
		t.Fatal(err)
	}
	if got := tr.FlushedCommitTime(); !got.IsZero() {
		t.Fatalf("with the older transaction unacknowledged: %v, want zero", got)
	}
	if err := tr.Ack(a); err != nil {
		t.Fatal(err)
	}
	if got := tr.FlushedCommitTime(); !got.Equal(t2) || tr.Flushed() != 30 {
		t.Fatalf("after both: %v at %s, want %v at 30", got, tr.Flushed(), t2)
	}
	tr.Idle(40)
	if got := tr.FlushedCommitTime(); !got.Equal(t2) {
		t.Fatalf("after Idle: %v, want %v kept", got, t2)
	}
}

// Regression (issue 37): transactions without events that committed behind
// a record Kafka had not acknowledged each took a queue entry: while Kafka
// stalled, a busy database grew the queue without bound. They are folded
// into the one before them, and the watermark still stops at the
// unacknowledged record and lands on the newest end once it is acked.
func TestEmptyTransactionsBehindAnUnackedOneCoalesce(t *testing.T) {
	tr := New(0x10)
	base := time.Unix(1700000000, 0)
	a := tr.Begin()
	if err := tr.Add(a); err != nil {
		t.Fatal(err)
	}
	if err := tr.Commit(a, 0x100, base); err != nil {
		t.Fatal(err)
	}
	end := LSN(0x100)
	for i := range 100000 {
		x := tr.Begin()
		end += 0x10
		if err := tr.Commit(x, end, base.Add(time.Duration(i+1)*time.Millisecond)); err != nil {
			t.Fatalf("empty transaction %d: %v", i, err)
		}
		if i == 50000 { // one with a record in the middle, acknowledged at once
			y := tr.Begin()
			if err := tr.Add(y); err != nil {
				t.Fatal(err)
			}
			end += 0x10
			if err := tr.Commit(y, end, base.Add(time.Duration(i+1)*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if err := tr.Ack(y); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, txns := tr.InFlight(); txns > 3 {
		t.Errorf("%d transactions queued behind one unacknowledged record, want them coalesced", txns)
	}
	if got := tr.Flushed(); got != 0x10 {
		t.Fatalf("Flushed = %s while the first record is unacknowledged, want 0/10", got)
	}
	if err := tr.Ack(a); err != nil {
		t.Fatal(err)
	}
	if got := tr.Flushed(); got != end {
		t.Errorf("Flushed = %s after the first record was acknowledged, want the newest end %s", got, end)
	}
	if got, want := tr.FlushedCommitTime(), base.Add(100000*time.Millisecond); !got.Equal(want) {
		t.Errorf("FlushedCommitTime = %v, want the newest commit's %v", got, want)
	}
	if _, txns := tr.InFlight(); txns != 0 {
		t.Errorf("%d transactions still queued", txns)
	}
}
