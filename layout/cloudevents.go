package layout

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// CloudEvents makes records CloudEvents (specification 1.0) in the Kafka
// protocol binding's binary content mode: the payload stays the record
// value as it is, and the event's attributes travel as headers after the
// id header: ce_specversion "1.0", ce_id the outbox id, ce_source,
// ce_type, ce_time the record timestamp (RFC 3339, UTC), and content-type.
// The record key stays the key column (the binding's partitioning). A
// header column or headers-object member may add extension attributes
// (ce_subject, ce_traceparent, ...), never set one of these.
type CloudEvents struct {
	// Source is ce_source, a URI-reference naming the producer of the
	// events, e.g. "/orders" or "https://example.com/orders". Required.
	Source string
	// Type is ce_type, a template like Columns.TopicTemplate: fixed text
	// ("com.example.order.created") or columns ("com.example.{type}").
	// Required.
	Type string
	// ContentType is the content-type header: the payload's media type.
	// Default DefaultCloudEventsContentType.
	ContentType string
}

// DefaultCloudEventsContentType is CloudEvents.ContentType's default.
const DefaultCloudEventsContentType = "application/json"

// ceReserved reports whether a header is one outboxd sets in CloudEvents mode.
func ceReserved(key string) bool {
	switch key {
	case "ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "content-type":
		return true
	}
	return false
}

// validate reports every problem of the options.
func (c *CloudEvents) validate() []error {
	var errs []error
	if c.Source == "" {
		errs = append(errs, errors.New("CloudEvents source: required (a URI-reference naming the producer, e.g. /orders)"))
	} else if _, err := url.Parse(c.Source); err != nil {
		errs = append(errs, fmt.Errorf("CloudEvents source %q is not a URI-reference", c.Source))
	}
	if c.Type == "" {
		errs = append(errs, errors.New("CloudEvents type: required (fixed, e.g. com.example.order.created, or a template over columns, e.g. com.example.{type})"))
	} else if _, err := parseTemplate("CloudEvents type template", c.Type); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// cloudEvents is the CloudEvents shape: the plain record, with the
// event's attributes as headers after the id and source headers, and
// none of the row's own headers may set one of them.
type cloudEvents struct{ opts CloudEvents }

// Check resolves the type template's columns in t.
func (s cloudEvents) Check(t *Table) []error {
	var errs []error
	t.ceType, errs = resolveTemplate(t.Table, t.Columns, "CloudEvents type template", s.opts.Type)
	return errs
}

func (s cloudEvents) Record(b *Builder, t *Table, row []outbox.Value) (outbox.Event, error) {
	attrs := func(buf, id []byte, at time.Time) ([]byte, int, error) {
		col := -1
		buf, err := s.appendAttributes(b, buf, id, at, func(buf []byte) ([]byte, error) {
			var err error
			buf, col, err = appendTemplate(buf, "CloudEvents type template", t.ceType, row, false)
			return buf, err
		})
		return buf, col, err
	}
	return b.record(t, row, attrs, reservedByCloudEvents)
}

// appendAttributes adds the CloudEvents attribute headers to b.hdrs,
// their values carved from buf (ce_id shares the id header's bytes);
// appendType appends ce_type.
func (s cloudEvents) appendAttributes(b *Builder, buf, id []byte, at time.Time, appendType func([]byte) ([]byte, error)) ([]byte, error) {
	start := 0
	put := func(key string) {
		b.hdrs = append(b.hdrs, outbox.Header{Key: key, Value: buf[start:len(buf):len(buf)]})
	}
	start, buf = len(buf), append(buf, "1.0"...)
	put("ce_specversion")
	b.hdrs = append(b.hdrs, outbox.Header{Key: "ce_id", Value: id})
	start, buf = len(buf), append(buf, s.opts.Source...)
	put("ce_source")
	start = len(buf)
	var err error
	if buf, err = appendType(buf); err != nil {
		return buf, err
	}
	put("ce_type")
	start, buf = len(buf), at.UTC().AppendFormat(buf, time.RFC3339Nano)
	put("ce_time")
	start, buf = len(buf), append(buf, s.opts.ContentType...)
	put("content-type")
	return buf, nil
}

// reservedByCloudEvents refuses a header of the record's own that sets
// one of the attributes outboxd sets.
func reservedByCloudEvents(key string) error {
	if ceReserved(key) {
		return fmt.Errorf("header %q is set by CloudEvents", key)
	}
	return nil
}

// appendEnvelopeType appends a message's ce_type: the type template with
// {topic} and {key} replaced by the envelope's; a message has no columns,
// so any other placeholder is an error.
func appendEnvelopeType(buf []byte, tmpl string, topic string, key *string) ([]byte, error) {
	parts, err := parseTemplate("CloudEvents type template", tmpl)
	if err != nil {
		return buf, err
	}
	for _, p := range parts {
		var v string
		switch {
		case p.column == "":
			buf = append(buf, p.literal...)
			continue
		case p.column == "topic":
			v = topic
		case p.column == "key" && key != nil:
			v = *key
		case p.column == "key":
			return buf, errors.New("null value in the CloudEvents type template: {key}, and the envelope has no key")
		default:
			return buf, fmt.Errorf("CloudEvents type template: {%s} has no value in a message envelope (only {topic} and {key})", p.column)
		}
		if v == "" {
			return buf, fmt.Errorf("empty value in the CloudEvents type template: {%s}", p.column)
		}
		buf = append(buf, v...)
	}
	return buf, nil
}
