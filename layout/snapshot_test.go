package layout

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// A backfilled row must become the very record a streamed insert of the
// same row becomes: Snapshot frames the row as pgoutput and decodes it.
func TestSnapshotRowsDecodeAsStreamedInserts(t *testing.T) {
	commit := time.Date(2026, 12, 2, 3, 4, 5, 6000, time.UTC)
	tests := []struct {
		name string
		cols []Column
		row  []tv
	}{
		{"default layout", outboxColumns(), []tv{text("42"), text("3f1e2d4c-0000-4000-8000-00000000002a"), text("orders"),
			text(`{"total": 5}`), text(`{"trace": "t1", "n": 2}`), text("2026-01-02 03:04:05+00")}},
		{"null key, payload and headers", outboxColumns(), []tv{text("7"), null, text("orders"), null, null, text("2026-01-02 03:04:05+00")}},
		{"bytea payload, int4 id, text key", []Column{{Name: "id", TypeOID: oidInt4}, {Name: "topic", TypeOID: oidVarchar}, {Name: "aggregate_id", TypeOID: oidText}, {Name: "payload", TypeOID: oidBytea}},
			[]tv{text("9"), text("blobs"), text("k-9"), text(`\x00ff10`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			streamed := NewDecoder(Columns{})
			mustDecode(t, streamed, encRelation(99, "app", "outbox", tt.cols...))
			mustDecode(t, streamed, encBegin(0x5000, commit, 1))
			want := mustDecode(t, streamed, encInsert(99, tt.row...))

			s, begin, err := NewSnapshot(Columns{}, 0x5001, commit) // events at 0x5000
			if err != nil {
				t.Fatal(err)
			}
			rel, err := s.Table("app", "outbox", tt.cols)
			if err != nil {
				t.Fatal(err)
			}
			if begin.Kind != KindBegin || begin.FinalLSN != 0x5000 || !begin.CommitTime.Equal(commit) {
				t.Fatalf("begin = %+v", begin)
			}
			got, err := s.Row(rel, rowValues(tt.row))
			if err != nil {
				t.Fatal(err)
			}
			want.Event.CommitTime, got.Event.CommitTime = want.Event.CommitTime.UTC(), got.Event.CommitTime.UTC()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("snapshot row:\n got %+v\nwant %+v", got, want)
			}
			end, err := s.Commit()
			if err != nil || end.Kind != KindCommit || end.EndLSN != 0x5001 {
				t.Fatalf("commit = %+v, %v", end, err)
			}
		})
	}
}

func TestSnapshotCountsRowsAndRefusesMalformedOnes(t *testing.T) {
	s, _, err := NewSnapshot(Columns{}, 0x10, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := s.Table("public", "outbox", outboxColumns())
	if err != nil {
		t.Fatal(err)
	}
	ok := []tv{text("1"), null, text("t"), text("{}"), null, null}
	for i := range 3 {
		m, err := s.Row(rel, rowValues(ok))
		if err != nil || m.Event.Index != i || m.Event.CommitLSN != 0x0F || m.Event.Table != "public.outbox" {
			t.Fatalf("row %d: %+v, %v", i, m.Event, err)
		}
	}
	_, err = s.Row(rel, rowValues([]tv{text("2"), null, null, text("{}"), null, null}))
	var re *RowError
	if !errors.As(err, &re) || re.Column != "topic" || re.ID != "2" || re.Index != 3 {
		t.Fatalf("row with a null topic: %v, want a RowError for column topic at index 3", err)
	}
	if _, err := s.Row(rel, rowValues(ok[:2])); err == nil {
		t.Fatal("a row with too few columns was accepted")
	}
	// A second table's rows go on counting: positions stay unique.
	other, err := s.Table("public", "outbox2", outboxColumns())
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.Row(other, rowValues(ok)); err != nil || m.Event.Index != 4 || m.Event.Table != "public.outbox2" {
		t.Fatalf("first row of a second table: %+v, %v; want index 4 of public.outbox2", m.Event, err)
	}
}

// Regression (issue 37): backfilled events took positions (consistent
// point, i); a streamed transaction whose commit starts exactly at the
// consistent point has positions (consistent point, i) too, and the
// exactly-once sink skipped its events as ones it already held: lost.
func TestSnapshotPositionsPrecedeTheStream(t *testing.T) {
	const cp = 0x7000
	s, _, err := NewSnapshot(Columns{}, cp, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := s.Table("public", "outbox", outboxColumns())
	if err != nil {
		t.Fatal(err)
	}
	firstStreamed := outbox.Position{CommitLSN: cp, Index: 0}
	for i := range 3 {
		m, err := s.Row(rel, rowValues([]tv{text("1"), null, text("t"), text("{}"), null, null}))
		if err != nil {
			t.Fatal(err)
		}
		if !m.Event.Position().Before(firstStreamed) {
			t.Errorf("backfilled event %d at %s, not before the first position the stream can give, %s", i, m.Event.Position(), firstStreamed)
		}
	}
	end, err := s.Commit()
	if err != nil || end.EndLSN != cp {
		t.Fatalf("commit = %+v, %v; want it to end at the consistent point %s", end, err, outbox.LSN(cp))
	}
	if _, _, err := NewSnapshot(Columns{}, 0, time.Unix(0, 0)); err == nil {
		t.Error("a snapshot at consistent point 0/0 was accepted")
	}
}

func mustDecode(t *testing.T, d *Decoder, b []byte) Message {
	t.Helper()
	m, err := d.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func rowValues(row []tv) [][]byte {
	out := make([][]byte, len(row))
	for i, v := range row {
		if v.Kind == 't' {
			out[i] = []byte(v.Data)
		}
	}
	return out
}
