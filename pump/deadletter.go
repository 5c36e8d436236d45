package pump

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// Headers a dead-letter record carries besides the original's.
const (
	hdrTopic     = "outboxd.dlq.topic"       // the topic it was meant for ("" for a row whose topic could not be read)
	hdrOutboxID  = "outboxd.dlq.outbox_id"   // the outbox id ("" when it could not be read)
	hdrCommitLSN = "outboxd.dlq.commit_lsn"  // its transaction's commit LSN
	hdrTable     = "outboxd.dlq.table"       // the outbox table
	hdrError     = "outboxd.dlq.error"       // why it could not be published
	hdrSize      = "outboxd.dlq.value_bytes" // a reference only: the size of the value left out
)

// deadLetterRecord is a refused record, unchanged (key, value, headers), on
// its way to the dead-letter topic, plus headers saying what happened.
func deadLetterRecord(orig *outbox.Event, topic string, cause error) outbox.Event {
	ev := *orig
	ev.Topic = topic
	ev.Headers = append(slices.Clip(orig.Headers), dlHeaders(orig.Topic, orig.ID(), orig, cause)...)
	return ev
}

// rejectedRecord is a row that could not become a record: its key and
// payload as far as they could be read, the id header when the id could be
// read, and the dead-letter headers.
func rejectedRecord(re *outbox.RowError, topic string) outbox.Event {
	ev := outbox.Event{Table: re.Table, Topic: topic, Key: re.Key, Value: re.Value,
		CommitTime: re.CommitTime, CommitLSN: re.CommitLSN, Index: re.Index}
	if re.ID != "" {
		ev.Headers = append(ev.Headers, outbox.Header{Key: "id", Value: []byte(re.ID)})
	}
	if re.Source != "" {
		ev.Headers = append(ev.Headers, outbox.Header{Key: outbox.SourceHeader, Value: []byte(re.Source)})
	}
	ev.Headers = append(ev.Headers, dlHeaders(re.Topic, re.ID, &ev, re)...)
	return ev
}

// deadLetterReference replaces a dead-letter record too large for the
// dead-letter topic: the same key, the id and dead-letter headers, the
// size of the value, and no value or other headers.
func deadLetterReference(dl *outbox.Event, cause error) outbox.Event {
	ev := *dl
	ev.Value = nil
	ev.Headers = nil
	for _, h := range dl.Headers {
		if h.Key == "id" || h.Key == outbox.SourceHeader || strings.HasPrefix(h.Key, "outboxd.dlq.") {
			ev.Headers = append(ev.Headers, h)
		}
	}
	ev.Headers = append(ev.Headers, outbox.Header{Key: hdrSize, Value: []byte(strconv.Itoa(len(dl.Value)))})
	for i := range ev.Headers {
		if ev.Headers[i].Key == hdrError {
			ev.Headers[i].Value = []byte(string(ev.Headers[i].Value) + "; too large for the dead-letter topic too: " + cause.Error())
		}
	}
	return ev
}

func dlHeaders(origTopic, id string, ev *outbox.Event, cause error) []outbox.Header {
	return []outbox.Header{
		{Key: hdrTopic, Value: []byte(origTopic)},
		{Key: hdrOutboxID, Value: []byte(id)},
		{Key: hdrCommitLSN, Value: []byte(ev.CommitLSN.String())},
		{Key: hdrTable, Value: []byte(ev.Table)},
		{Key: hdrError, Value: []byte(cause.Error())},
	}
}

// header returns the value of the last header named key ("" if none).
func header(ev *outbox.Event, key string) string {
	for i := len(ev.Headers) - 1; i >= 0; i-- {
		if ev.Headers[i].Key == key {
			return string(ev.Headers[i].Value)
		}
	}
	return ""
}

// queueDeadLetter hands a refused record to Run, which publishes its
// dead-letter record: the sink's callback must not publish itself.
func (p *Pump) queueDeadLetter(r *record, cause error) {
	r.ev = deadLetterRecord(&r.ev, p.cfg.DeadLetterTopic, cause)
	r.deadLetter = true
	p.queue(r)
}

func (p *Pump) queue(r *record) {
	p.dlMu.Lock()
	if p.dlStopped {
		p.dlMu.Unlock()
		p.win.release(r)
		return
	}
	p.dlJobs = append(p.dlJobs, r)
	p.dlMu.Unlock()
	select {
	case p.dlWake <- struct{}{}:
	default:
	}
}

// stopDeadLetters ends dead-lettering when Run returns. Each job queued
// and not published, and each queued later, gives its room in the window
// back: nobody will publish it, and a Drain must not wait for it (the
// record is not acknowledged, so the watermark never passes it).
func (p *Pump) stopDeadLetters() {
	p.dlMu.Lock()
	jobs := p.dlJobs
	p.dlJobs, p.dlStopped = nil, true
	p.dlMu.Unlock()
	for _, r := range jobs {
		p.win.release(r)
	}
}

func (p *Pump) takeDeadLetterJobs() []*record {
	p.dlMu.Lock()
	defer p.dlMu.Unlock()
	jobs := p.dlJobs
	p.dlJobs = nil
	return jobs
}

// logDeadLetter says at Error that a record or row goes to the dead-letter
// topic instead of its own, once for each; dl is its dead-letter record.
func (p *Pump) logDeadLetter(msg string, dl *outbox.Event) {
	p.log.Error(msg, "outbox_id", header(dl, hdrOutboxID), "commit_lsn", dl.CommitLSN.String(), "index", dl.Index,
		"table", dl.Table, "topic", header(dl, hdrTopic), "dead_letter_topic", dl.Topic, "reason", header(dl, hdrError))
}

// deadLetter publishes a dead-letter record in the place of the refused
// one, whose room in the window it keeps.
func (p *Pump) deadLetter(r *record) {
	if !r.reference { // a reference was logged as the record it stands for
		p.logDeadLetter("record refused for good; sending it to the dead-letter topic", &r.ev)
	}
	r.sent = time.Now()
	p.sink.Publish(&r.ev, func(err error) {
		defer p.recoverCallback(r)
		if err == nil {
			p.ack(r)
			return
		}
		if p.withdrawing.Load() {
			p.win.release(r) // withdrawn (see Withdraw): the record it stands for is read again
			return
		}
		if errors.Is(err, outbox.ErrRecordTooLarge) && !r.reference {
			r.ev = deadLetterReference(&r.ev, err)
			r.reference = true
			p.log.Error("dead-letter record too large; sending a reference without the value", "outbox_id", r.ev.ID(), "dead_letter_topic", r.ev.Topic)
			p.queue(r)
			return
		}
		p.fail(fmt.Errorf("publishing to the dead-letter topic %s: %w (the record it stood for: %s)", r.ev.Topic, err, header(&r.ev, hdrError)))
		p.win.release(r)
	})
}
