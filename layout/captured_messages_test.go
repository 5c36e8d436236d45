package layout

import (
	"encoding/hex"
	"errors"
	"testing"

	"github.com/outboxd/outboxd/outbox"
)

// capturedMessages is a pgoutput stream captured from PostgreSQL 15
// (proto_version '1', messages 'true'): one transaction calling the
// outboxd_emit of migration 0006 twice (an event with key, headers and
// payload, then one with only a topic), then, on its own, a
// non-transactional pg_logical_emit_message(false, 'outboxd.event', ...).
// The messages are seeds of FuzzDecodeMessages
// (testdata/fuzz/FuzzDecodeMessages/pg15-*).
var capturedMessages = []struct {
	name, hex string
}{
	{"01-Begin", "4200000003d166c740000304a7bf567283000bd3d6"},
	{"02-Message-event", "4d0100000003d166c6b06f7574626f78642e6576656e7400000000a87b226b6579223a202236663163326133652d386434622d346335612d396537662d306131623263336434653566222c2022746f706963223a20226f72646572732e63726561746564222c202268656164657273223a207b2274797065223a20224f7264657243726561746564222c2022617474656d7074223a20317d2c20227061796c6f6164223a207b226e6f7465223a2022636166c3a9222c20226f72646572223a2034327d7d"},
	{"03-Message-tombstone", "4d0100000003d166c7406f7574626f78642e6576656e74000000004a7b226b6579223a206e756c6c2c2022746f706963223a20226f72646572732e63726561746564222c202268656164657273223a206e756c6c2c20227061796c6f6164223a206e756c6c7d"},
	{"04-Commit", "430000000003d166c74000000003d166c770000304a7bf567283"},
	{"05-Message-standalone", "4d0000000003d1aa42c06f7574626f78642e6576656e7400000000297b22746f706963223a20226f72646572732e63726561746564222c20227061796c6f6164223a20377d"},
}

func capturedMessageBytes(t testing.TB, i int) []byte {
	t.Helper()
	b, err := hex.DecodeString(capturedMessages[i].hex)
	if err != nil {
		t.Fatalf("%s: %v", capturedMessages[i].name, err)
	}
	return b
}

// TestCapturedMessagesPostgres15 replays real pgoutput bytes of outboxd_emit
// through one Decoder with the message prefix on.
func TestCapturedMessagesPostgres15(t *testing.T) {
	d := NewDecoder(Columns{MessagePrefix: "outboxd.event"})
	commit := pgTime(0x304a7bf567283)
	ev := func(lsn string, key, value []byte, hs ...outbox.Header) outbox.Event {
		return outbox.Event{Table: "message:outboxd.event", Topic: "orders.created", Key: key, Value: value,
			Headers: append([]outbox.Header{hdr("id", lsn)}, hs...), CommitTime: commit, CommitLSN: 0x3D166C740}
	}
	wants := []Message{
		{Kind: KindBegin, Xid: 775126, FinalLSN: 0x3D166C740, CommitTime: commit},
		{Kind: KindEvent, Event: ev("3/D166C6B0", []byte("6f1c2a3e-8d4b-4c5a-9e7f-0a1b2c3d4e5f"), []byte(`{"note": "café", "order": 42}`),
			hdr("type", "OrderCreated"), hdr("attempt", "1"))},
		{Kind: KindEvent, Event: ev("3/D166C740", nil, nil)},
		{Kind: KindCommit, CommitLSN: 0x3D166C740, EndLSN: 0x3D166C770, CommitTime: commit},
	}
	wants[2].Event.Index = 1
	for i, want := range wants {
		got, err := d.Decode(capturedMessageBytes(t, i))
		if err != nil {
			t.Fatalf("%s: %v", capturedMessages[i].name, err)
		}
		if diff := diffMessage(got, want); diff != "" {
			t.Errorf("%s: %s", capturedMessages[i].name, diff)
		}
	}
	_, err := d.Decode(capturedMessageBytes(t, 4))
	var re *RowError
	if !errors.As(err, &re) || !re.Standalone || re.ID != "3/D1AA42C0" || re.Topic != "orders.created" || string(re.Value) != "7" {
		t.Errorf("%s: %v, want a standalone RowError carrying the envelope's topic and payload", capturedMessages[4].name, err)
	}
}
