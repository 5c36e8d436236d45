package decode

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// The tests here look at what the parser hands over: frames, rows as
// values, emitted messages, places. What a row becomes as a record is
// package layout's, tested there through both steps.

func decodeAll(t testing.TB, d *Decoder, msgs ...[]byte) []Message {
	t.Helper()
	out := make([]Message, 0, len(msgs))
	for i, m := range msgs {
		got, err := d.Decode(m)
		if err != nil {
			t.Fatalf("message %d (%q): %v", i, m[0], err)
		}
		out = append(out, got)
	}
	return out
}

// primedDecoder has seen the outbox relation and a Begin.
func primedDecoder(t testing.TB) *Decoder {
	t.Helper()
	d := NewDecoder("outboxd.event")
	decodeAll(t, d, outboxRelation(), testBegin())
	return d
}

// values returns a row's values as strings, "<null>" for NULL, with the
// format: "t:42".
func values(r outbox.Row) []string {
	out := make([]string, len(r.Values))
	for i, v := range r.Values {
		if v.Format == outbox.ValueNull {
			out[i] = "<null>"
			continue
		}
		out[i] = string(v.Format) + ":" + string(v.Data)
	}
	return out
}

func TestDecodeFrames(t *testing.T) {
	d := NewDecoder("")
	// A row's values alias the decoder's scratch and the message: read
	// each before the next Decode.
	var got []Message
	var rows [][]string
	for _, in := range [][]byte{outboxRelation(), testBegin(),
		outboxInsert(text("42"), text("k"), text("orders"), bin("\x01{}"), null),
		outboxInsert(text("43"), null, text("orders"), text("{}"), text(`{"a": 1}`)),
		testCommit()} {
		m := decodeAll(t, d, in)[0]
		got = append(got, m)
		if m.Kind == KindRow {
			rows = append(rows, values(m.Row))
		}
	}
	if got[0].Kind != KindIgnored {
		t.Errorf("relation: Kind %v, want ignored", got[0].Kind)
	}
	if b := got[1]; b.Kind != KindBegin || b.Xid != 777 || b.FinalLSN != 0x1000 || !b.CommitTime.Equal(testCommitTime) {
		t.Errorf("begin: %+v", b)
	}
	if b := got[1].Begin(); b != (outbox.Begin{Xid: 777, CommitLSN: 0x1000, CommitTime: b.CommitTime}) || !b.CommitTime.Equal(testCommitTime) {
		t.Errorf("Begin() = %+v", b)
	}
	for i, want := range [][]string{
		{"t:42", "t:k", "t:orders", "b:\x01{}", "<null>", "t:2026-01-02 03:04:05.123456+00"},
		{"t:43", "<null>", "t:orders", "t:{}", `t:{"a": 1}`, "t:2026-01-02 03:04:05.123456+00"},
	} {
		m := got[2+i]
		if m.Kind != KindRow {
			t.Fatalf("insert %d: Kind %v, want row", i, m.Kind)
		}
		r := m.Row
		if r.Relation == nil || r.Relation.Table != "public.outbox" || r.Relation.ID != outboxRelID || !reflect.DeepEqual(r.Relation.Columns, outboxColumns()) {
			t.Errorf("insert %d: relation %+v", i, r.Relation)
		}
		if g := rows[i]; !reflect.DeepEqual(g, want) {
			t.Errorf("insert %d: values %q, want %q", i, g, want)
		}
		if r.Place != (outbox.Place{CommitLSN: 0x1000, CommitTime: r.CommitTime, Index: i}) || !r.CommitTime.Equal(testCommitTime) {
			t.Errorf("insert %d: place %+v, want 0/1000 #%d at the commit time", i, r.Place, i)
		}
	}
	if c := got[4]; c.Kind != KindCommit || c.CommitLSN != 0x1000 || c.EndLSN != 0x1030 || !c.Commit().CommitTime.Equal(testCommitTime) {
		t.Errorf("commit: %+v", c)
	}
}

// A Relation message for a table already described is a new description:
// rows sent under it point at it, so a layout checks it again.
func TestDecodeRelationDescribedAgain(t *testing.T) {
	d := NewDecoder("")
	first := decodeAll(t, d, outboxRelation(), testBegin(), outboxInsert(text("1"), null, text("t"), null, null))[2].Row.Relation
	cols := append(outboxColumns()[:5:5], outbox.Column{Name: "extra", TypeOID: 25, TypeMod: -1})
	second := decodeAll(t, d, encRelation(outboxRelID, "public", "outbox", cols...),
		encInsert(outboxRelID, text("2"), null, text("t"), null, null, null))[1].Row.Relation
	if first == second {
		t.Fatal("the second description is the first's value")
	}
	if second.Columns[5].Name != "extra" || first.Columns[5].Name != "created_at" {
		t.Errorf("descriptions %+v and %+v", first.Columns, second.Columns)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name  string
		prime [][]byte
		in    []byte
		want  string
	}{
		{"empty message", nil, nil, "empty message"},
		{"unknown type", nil, []byte{'S', 0}, "unsupported message type 'S'"},
		{"begin inside a transaction", [][]byte{testBegin()}, testBegin(), "transaction 777 is still open"},
		{"commit outside a transaction", nil, testCommit(), "commit outside a transaction"},
		{"insert outside a transaction", [][]byte{outboxRelation()}, outboxInsert(text("1"), null, text("t"), null, null), "insert outside a transaction"},
		{"insert of an undescribed relation", [][]byte{testBegin()}, encInsert(99, text("1")), "unknown relation id 99"},
		{"too few columns", [][]byte{outboxRelation(), testBegin()}, encInsert(outboxRelID, text("1")), "tuple has 1 columns, the relation message described 6"},
		{"unchanged TOAST value", [][]byte{outboxRelation(), testBegin()}, outboxInsert(text("1"), unchanged, text("t"), null, null), `column "aggregate_id": unchanged TOAST value`},
		{"old tuple in an insert", [][]byte{outboxRelation(), testBegin()}, msg{'I'}.U32(outboxRelID).U8('O').Tuple(text("1")), "tuple kind 'O', want 'N'"},
		{"bad value kind", [][]byte{outboxRelation(), testBegin()}, msg{'I'}.U32(outboxRelID).U8('N').U16(6).U8('x'), "value kind 'x'"},
		{"trailing bytes", [][]byte{outboxRelation(), testBegin()}, append(outboxInsert(text("1"), null, text("t"), null, null), 0), "1 unexpected trailing bytes"},
		{"begin of the wrong length", nil, testBegin()[:20], "message body is 19 bytes, want 20"},
		{"transactional message outside a transaction", nil, encLogicalMessage(true, 0x10, "outboxd.event", "{}"), "transactional message outside a transaction"},
		{"update of the wrong shape", nil, encUpdate(outboxRelID, 'X', []tv{text("1")}, nil), "decoding update: tuple kind 'X'"},
		{"truncate with missing ids", nil, msg{'T'}.U32(2).U8(0).U32(1), "2 relation ids need 8 bytes, 4 left"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder("outboxd.event")
			decodeAll(t, d, tt.prime...)
			got, err := d.Decode(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode = %v, %v; want an error containing %q", got.Kind, err, tt.want)
			}
			if got.Kind != KindIgnored {
				t.Errorf("Kind %v with the error", got.Kind)
			}
		})
	}
}

// Updates, deletes, truncates, types, origins and messages under other
// prefixes are checked and ignored.
func TestDecodeIgnored(t *testing.T) {
	d := primedDecoder(t)
	for name, m := range map[string][]byte{
		"update":          encUpdate(outboxRelID, 'O', []tv{text("41"), null}, []tv{text("42"), unchanged}),
		"update new only": encUpdate(outboxRelID, 0, nil, []tv{text("42"), unchanged}),
		"delete":          encDelete(outboxRelID, 'K', text("42"), null),
		"truncate":        encTruncate(1, 2),
		"type":            encType(16500, "public", "mood"),
		"origin":          encOrigin(0x10, "node_a"),
		"other prefix":    encLogicalMessage(true, 0x10, "outboxd.heartbeat", "{}"),
		"prefix's prefix": encLogicalMessage(true, 0x10, "outboxd.even", "{}"),
	} {
		got, err := d.Decode(m)
		if err != nil || got.Kind != KindIgnored {
			t.Errorf("%s: Kind %v, %v; want ignored", name, got.Kind, err)
		}
	}
	// Without a prefix, every message is ignored.
	if got, err := NewDecoder("").Decode(encLogicalMessage(false, 0x10, "outboxd.event", "{}")); err != nil || got.Kind != KindIgnored {
		t.Errorf("no prefix: Kind %v, %v; want ignored", got.Kind, err)
	}
}

// Rows and emitted messages of a transaction share one count of places;
// a non-transactional message inside a transaction takes a place too, one
// outside any transaction has none.
func TestDecodeEmittedPlaces(t *testing.T) {
	d := NewDecoder("outboxd.event")
	got := decodeAll(t, d, outboxRelation(),
		encLogicalMessage(false, 0x0f00, "outboxd.event", "standalone"),
		testBegin(),
		outboxInsert(text("1"), null, text("t"), null, null),
		encLogicalMessage(true, 0x1010, "outboxd.event", `{"topic": "a"}`),
		encLogicalMessage(false, 0x1020, "outboxd.event", "inside"),
		outboxInsert(text("2"), null, text("t"), null, null),
		testCommit())
	standalone := got[1].Emitted
	if got[1].Kind != KindEmitted || standalone.Transactional || standalone.InTxn || standalone.Place != (outbox.Place{}) ||
		standalone.LSN != 0x0f00 || string(standalone.Content) != "standalone" || standalone.Prefix != "outboxd.event" {
		t.Errorf("standalone message: %v %+v", got[1].Kind, standalone)
	}
	type step struct {
		kind  Kind
		index int
	}
	var steps []step
	for _, m := range got[3:7] {
		idx := m.Row.Index
		if m.Kind == KindEmitted {
			idx = m.Emitted.Index
			if !m.Emitted.InTxn || m.Emitted.CommitLSN != 0x1000 {
				t.Errorf("emitted message at %s: %+v, want in the transaction at 0/1000", m.Emitted.LSN, m.Emitted)
			}
		}
		steps = append(steps, step{m.Kind, idx})
	}
	want := []step{{KindRow, 0}, {KindEmitted, 1}, {KindEmitted, 2}, {KindRow, 3}}
	if !reflect.DeepEqual(steps, want) {
		t.Errorf("places %v, want %v", steps, want)
	}
	if !got[4].Emitted.Transactional || got[5].Emitted.Transactional {
		t.Errorf("transactional flags %v %v, want true false", got[4].Emitted.Transactional, got[5].Emitted.Transactional)
	}
	// The next transaction counts from 0 again.
	next := decodeAll(t, d, encBegin(0x2000, testCommitTime, 778), outboxInsert(text("3"), null, text("t"), null, null))
	if r := next[1].Row; r.Index != 0 || r.CommitLSN != 0x2000 {
		t.Errorf("first row of the next transaction at %s #%d, want 0/2000 #0", r.CommitLSN, r.Index)
	}
}

// Every strict prefix of a well-formed message is an error: nothing
// truncated is taken for a row or silently ignored.
func TestTruncated(t *testing.T) {
	msgs := map[string][]byte{
		"begin":             testBegin(),
		"commit":            testCommit(),
		"relation":          outboxRelation(),
		"insert":            outboxInsert(text("42"), text("k"), text("orders"), text("{}"), text(`{"a": "b"}`)),
		"insert with nulls": outboxInsert(text("42"), null, text("orders"), null, null),
		"update":            encUpdate(outboxRelID, 'O', []tv{text("41"), null}, []tv{text("42"), unchanged}),
		"update new only":   encUpdate(outboxRelID, 0, nil, []tv{text("42"), unchanged}),
		"delete":            encDelete(outboxRelID, 'K', text("42"), null),
		"truncate":          encTruncate(1, 2),
		"type":              encType(16500, "public", "mood"),
		"origin":            encOrigin(0x10, "node_a"),
		"emitted message":   encLogicalMessage(false, 0x10, "outboxd.event", "hello"),
	}
	for name, m := range msgs {
		t.Run(name, func(t *testing.T) {
			fresh := primedDecoder
			if name == "begin" { // a Begin needs a decoder outside a transaction
				fresh = func(t testing.TB) *Decoder { return decoderAfter(t, outboxRelation()) }
			}
			if _, err := fresh(t).Decode(m); err != nil {
				t.Fatalf("whole message: %v", err)
			}
			for n := 0; n < len(m); n++ {
				if got, err := fresh(t).Decode(m[:n]); err == nil {
					t.Errorf("prefix of %d/%d bytes: Kind %v, no error", n, len(m), got.Kind)
				}
			}
		})
	}
}

func decoderAfter(t testing.TB, msgs ...[]byte) *Decoder {
	t.Helper()
	d := NewDecoder("outboxd.event")
	decodeAll(t, d, msgs...)
	return d
}

// Decoded relations are the decoder's own: the caller reuses its buffer.
func TestRelationDoesNotAliasInput(t *testing.T) {
	in := outboxRelation()
	d := decoderAfter(t, in)
	for i := range in {
		in[i] = 'X'
	}
	got := decodeAll(t, d, testBegin(), outboxInsert(text("1"), null, text("t"), null, null))[1].Row.Relation
	if got.Table != "public.outbox" || !reflect.DeepEqual(got.Columns, outboxColumns()) {
		t.Errorf("relation after overwriting its message: %+v", got)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindIgnored: "ignored", KindBegin: "begin", KindRow: "row", KindEmitted: "emitted", KindCommit: "commit", 9: "Kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

func TestSnapshotFramesRowsAsInserts(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	s, begin, err := NewSnapshot(0x5001, at)
	if err != nil {
		t.Fatal(err)
	}
	if begin.Kind != KindBegin || begin.FinalLSN != 0x5000 || !begin.CommitTime.Equal(at) {
		t.Errorf("begin %+v, want at 0/5000", begin)
	}
	rel, err := s.Table("app", "Outbox", outboxColumns())
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"1", "2"} {
		m, err := s.Row(rel, [][]byte{[]byte(id), nil, []byte("t"), []byte("{}"), nil, []byte("now")})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"t:" + id, "<null>", "t:t", "t:{}", "<null>", "t:now"}
		if m.Kind != KindRow || m.Row.Relation.Table != "app.Outbox" || !reflect.DeepEqual(values(m.Row), want) || m.Row.Index != i || m.Row.CommitLSN != 0x5000 {
			t.Errorf("row %d: %v %+v %q", i, m.Kind, m.Row.Place, values(m.Row))
		}
	}
	if _, err := s.Row(rel, [][]byte{[]byte("3")}); err == nil {
		t.Error("a row with too few values: no error")
	}
	c, err := s.Commit()
	if err != nil || c.Kind != KindCommit || c.CommitLSN != 0x5000 || c.EndLSN != 0x5001 {
		t.Errorf("commit %+v, %v; want 0/5000 ending at the consistent point 0/5001", c, err)
	}
	if _, _, err := NewSnapshot(0, at); err == nil {
		t.Error("a consistent point of 0/0: no error")
	}
}

// FuzzDecode decodes arbitrary bytes with a decoder that has seen the
// outbox relation and a Begin: it must not panic or modify its input; a
// row has one value per column of its relation and the next place; and
// when a message decodes without error, every strict prefix of it must be
// an error. The seeds in testdata/fuzz/FuzzDecode/pg15-* were captured
// from PostgreSQL 15.
func FuzzDecode(f *testing.F) {
	f.Add(outboxInsert(text("42"), text("k"), text("orders"), text("{}"), text(`{"a": "b\"", "c": [1, {"d": null}]}`)))
	f.Add(encUpdate(outboxRelID, 'O', []tv{text("41"), null}, []tv{text("42"), unchanged}))
	f.Add(encLogicalMessage(true, 0x10, "outboxd.event", "hello"))
	f.Add(encOrigin(0x10, "node_a"))
	f.Add(testCommit())
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		got, err := primedDecoder(t).Decode(in)
		if !bytes.Equal(in, orig) {
			t.Fatal("Decode modified its input")
		}
		if err != nil {
			if got.Kind != KindIgnored {
				t.Fatalf("Kind %v with error %v", got.Kind, err)
			}
			return
		}
		if got.Kind == KindRow {
			if len(got.Row.Values) != len(got.Row.Relation.Columns) {
				t.Fatalf("row with %d values for %d columns", len(got.Row.Values), len(got.Row.Relation.Columns))
			}
			if got.Row.Index != 0 || got.Row.CommitLSN != 0x1000 {
				t.Fatalf("first row at %s #%d, want 0/1000 #0", got.Row.CommitLSN, got.Row.Index)
			}
		}
		if len(in) > 4096 {
			return // keep the quadratic check below cheap
		}
		for n := 0; n < len(in); n++ {
			if p, err := primedDecoder(t).Decode(in[:n]); err == nil {
				t.Fatalf("prefix of %d/%d bytes of a valid %v message decodes as %v without error", n, len(in), got.Kind, p.Kind)
			}
		}
	})
}

// Regression (issue 38): after decode stopped copying rows, the decoder's
// scratch kept the last insert's values, and with them its message,
// alive until the next insert: an idle stream held a large row for ever.
// The next message of any kind lets go of it.
func TestNextMessageLetsGoOfTheLastRow(t *testing.T) {
	d := primedDecoder(t)
	decodeAll(t, d, outboxInsert(text("42"), text("k"), text("orders"), text("{}"), null))
	decodeAll(t, d, testCommit())
	for i, v := range d.row[:cap(d.row)] {
		if v.Data != nil {
			t.Fatalf("value %d of the last row still held after the next message: %q", i, v.Data)
		}
	}
}
