package publish

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/outbox"
)

// DefaultProgressTopic is where the exactly-once sink keeps its progress.
const DefaultProgressTopic = "outboxd.progress"

// progressKey is the key of a slot's progress records: the slot, the
// server's system identifier and its timeline. Two databases never share a
// progress record, and neither do two histories of one: a promoted standby
// or a restored backup keeps the system identifier but starts a new
// timeline, whose LSNs can be below a position the old one recorded.
func progressKey(slot, systemID string, timeline int32) []byte {
	return []byte(slot + "@" + systemID + "/" + strconv.Itoa(int(timeline)))
}

// progressHeader names, on every progress record, the transactional id
// that wrote it. The progress reader trusts only records in committed
// Kafka transactions that carry it with its own transactional id (see
// readProgress).
const progressHeader = outbox.TransactionalIDHeader

// errProgressTopic refuses an event addressed to the progress topic.
var errProgressTopic = errors.New("the progress topic holds outboxd's exactly-once progress: no event may be published there")

// progressRecord is the record that commits pos under key.
func progressRecord(topic string, key []byte, txnID string, pos outbox.Position) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: key, Value: encodeProgress(pos),
		Headers: []kgo.RecordHeader{{Key: progressHeader, Value: []byte(txnID)}}}
}

// progressValue is a progress record's value: the last event a committed
// Kafka transaction holds. Where a large PostgreSQL transaction spans
// several Kafka transactions, Index says how far into it the last one got.
type progressValue struct {
	CommitLSN string `json:"commit_lsn"`
	Index     int    `json:"index"`
}

func encodeProgress(p outbox.Position) []byte {
	b, _ := json.Marshal(progressValue{CommitLSN: p.CommitLSN.String(), Index: p.Index}) // cannot fail
	return b
}

func decodeProgress(b []byte) (outbox.Position, error) {
	var v progressValue
	if err := json.Unmarshal(b, &v); err != nil {
		return outbox.Position{}, fmt.Errorf("reading a progress record %q: %w", b, err)
	}
	lsn, err := outbox.ParseLSN(v.CommitLSN)
	if err != nil {
		return outbox.Position{}, fmt.Errorf("reading a progress record %q: %w", b, err)
	}
	if v.Index < 0 {
		return outbox.Position{}, fmt.Errorf("reading a progress record %q: negative index", b)
	}
	return outbox.Position{CommitLSN: lsn, Index: v.Index}, nil
}
