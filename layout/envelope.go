package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/outboxd/outboxd/outbox"
)

// Table-less events: a transactional logical decoding message
// (pg_logical_emit_message(true, prefix, content)) whose prefix is
// Columns.MessagePrefix is an event like an inserted outbox row, in its
// place among the transaction's events. Its content is a JSON envelope:
//
//	{"topic": "orders.created", "key": "5b0c...", "headers": {"type": "OrderCreated"}, "payload": {"order": 42}}
//
//   - topic: a non-empty string (required);
//   - key: a string, or null or absent for no key;
//   - headers: an object (same rules as the headers column: string values
//     unescaped, others as JSON text, "id" reserved), or null or absent;
//   - payload: any JSON value, published as its text in the envelope; null
//     or absent is a tombstone.
//
// Any other member is an error (a typo would otherwise lose a header). The
// id header is the message's LSN ("16/B374D848"): unique in the WAL and the
// same on every redelivery from the slot, never equal to an integer id;
// with Columns.Source the source header follows it, naming the table as
// "message:<prefix>".
// A non-transactional message under the prefix
// (pg_logical_emit_message(false, ...), emitted even when its transaction
// rolls back) is a RowError, Standalone when it came outside any
// transaction: never published as an event, never skipped silently.

// messageTable is what Event.Table and RowError.Table say for a message.
func messageTable(prefix string) string { return "message:" + prefix }

// envelope is the shape of table-less events: what a message under
// Columns.MessagePrefix becomes. With ShapeCloudEvents its records carry
// CloudEvents attributes too, ce_type from the type template's {topic}
// and {key}.
type envelope struct {
	table  string       // messageTable(prefix)
	source string       // the source header's value; "" without Columns.Source
	ce     *cloudEvents // nil: no CloudEvents attributes
}

func newEnvelope(cols Columns) envelope {
	e := envelope{table: messageTable(cols.MessagePrefix)}
	if cols.MessagePrefix != "" {
		e.source = source(cols, e.table)
	}
	if cols.Shape == ShapeCloudEvents {
		e.ce = &cloudEvents{opts: cols.CloudEvents}
	}
	return e
}

// envelopeContent is the JSON content of a table-less event.
type envelopeContent struct {
	Topic, Key       *string // nil: absent or null
	Headers, Payload json.RawMessage
}

// record makes the record of a message: an Event, or a *outbox.RowError
// for a message that cannot become one.
func (s envelope) record(b *Builder, m *outbox.Emitted) (outbox.Event, error) {
	lsn, content := m.LSN, m.Content
	if !m.Transactional {
		e := &outbox.RowError{Table: s.table, ID: lsn.String(), Source: s.source, MessageLSN: lsn, Standalone: true,
			CommitLSN: lsn, Err: errors.New("a non-transactional message (pg_logical_emit_message(false, ...)) is sent even when its transaction rolls back: " +
				"emit events with pg_logical_emit_message(true, ...) or outboxd_emit")}
		if m.InTxn {
			e.Standalone, e.CommitLSN, e.CommitTime, e.Index = false, m.CommitLSN, m.CommitTime, m.Index
		}
		fillFromEnvelope(b, e, content)
		return outbox.Event{}, e
	}
	ev, err := s.event(b, lsn, content)
	if err != nil {
		e := &outbox.RowError{Table: s.table, ID: lsn.String(), Source: s.source, MessageLSN: lsn, Err: err,
			CommitTime: m.CommitTime, CommitLSN: m.CommitLSN, Index: m.Index}
		fillFromEnvelope(b, e, content)
		return outbox.Event{}, e
	}
	return ev, nil
}

// parseEnvelope checks the envelope's shape: a JSON object with only the
// known members, each once, named exactly (encoding/json's struct decoding
// would match "Topic" too, and let a repeated member win silently), each of
// its type.
func parseEnvelope(content []byte) (envelopeContent, error) {
	var env envelopeContent
	if !json.Valid(content) {
		return env, errors.New("envelope is not valid JSON")
	}
	if i := skipSpace(content, 0); i >= len(content) || content[i] != '{' {
		return env, fmt.Errorf("envelope is %s, want a JSON object with topic, key, headers and payload", jsonKind(content, skipSpace(content, 0)))
	}
	dec := json.NewDecoder(bytes.NewReader(content))
	if _, err := dec.Token(); err != nil { // {
		return env, fmt.Errorf("envelope: %w", err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return env, fmt.Errorf("envelope: %w", err)
		}
		name := tok.(string) // an object's keys are strings
		if seen[name] {
			return env, fmt.Errorf("envelope: member %q twice", name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return env, fmt.Errorf("envelope: %w", err)
		}
		switch name {
		case "topic", "key":
			var v *string
			if err := json.Unmarshal(raw, &v); err != nil {
				return env, fmt.Errorf("envelope: %s is %s, want a string", name, jsonKind(raw, 0))
			}
			if name == "topic" {
				env.Topic = v
			} else {
				env.Key = v
			}
		case "headers":
			env.Headers = raw
		case "payload":
			env.Payload = raw
		default:
			return env, fmt.Errorf("envelope: unknown member %q (want topic, key, headers and payload)", name)
		}
	}
	return env, nil
}

// event builds the event of a message, its bytes in one allocation.
func (s envelope) event(b *Builder, lsn outbox.LSN, content []byte) (outbox.Event, error) {
	env, err := parseEnvelope(content)
	if err != nil {
		return outbox.Event{}, err
	}
	if env.Topic == nil || *env.Topic == "" {
		return outbox.Event{}, errors.New("envelope: topic missing or empty")
	}
	if err := b.checkTopic([]byte(*env.Topic)); err != nil {
		return outbox.Event{}, fmt.Errorf("envelope: %w", err)
	}
	ev := outbox.Event{Table: s.table, Topic: b.intern([]byte(*env.Topic)),
		CommitTime: b.commitTime, CommitLSN: b.commitLSN, Index: b.index}
	buf := make([]byte, 0, 20+len(content)+len(s.source))
	buf = append(buf, lsn.String()...)
	idValue := buf[:len(buf):len(buf)]
	if env.Key != nil {
		start := len(buf)
		buf = append(buf, *env.Key...)
		ev.Key = buf[start:len(buf):len(buf)]
	}
	if p := bytes.TrimSpace(env.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		start := len(buf)
		buf = append(buf, p...)
		ev.Value = buf[start:len(buf):len(buf)]
	}
	buf = b.headersFrom(buf, idValue, s.source)
	var reserved func(string) error
	if ce := s.ce; ce != nil {
		if buf, err = ce.appendAttributes(b, buf, idValue, ev.RecordTime(), func(buf []byte) ([]byte, error) {
			return appendEnvelopeType(buf, ce.opts.Type, ev.Topic, env.Key)
		}); err != nil {
			clear(b.hdrs)
			return outbox.Event{}, err
		}
		reserved = reservedByCloudEvents
	}
	fixed := len(b.hdrs)
	if h := bytes.TrimSpace(env.Headers); len(h) > 0 && !bytes.Equal(h, []byte("null")) {
		if b.hdrs, _, err = b.appendHeaders(b.hdrs, buf, h); err != nil {
			clear(b.hdrs)
			return outbox.Event{}, fmt.Errorf("envelope headers: %w", err)
		}
	}
	if err := b.checkOwnHeaders(fixed, reserved); err != nil {
		clear(b.hdrs)
		return outbox.Event{}, err
	}
	return b.finish(ev), nil
}

// fillFromEnvelope copies what can be read of a refused message into e:
// its topic, key and payload, for a dead-letter record; the whole content
// as the value when the envelope cannot be read at all.
func fillFromEnvelope(b *Builder, e *outbox.RowError, content []byte) {
	env, err := parseEnvelope(content)
	if err != nil {
		e.Value = append([]byte(nil), content...)
		return
	}
	if env.Topic != nil && b.checkTopic([]byte(*env.Topic)) == nil {
		e.Topic = *env.Topic
	}
	if env.Key != nil {
		e.Key = []byte(*env.Key)
	}
	if p := bytes.TrimSpace(env.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		e.Value = append([]byte(nil), p...)
	}
}
