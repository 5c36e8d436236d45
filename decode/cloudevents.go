package decode

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

// appendCloudEvents adds the CloudEvents attribute headers to d.hdrs, their
// values carved from buf (ce_id shares the id header's bytes). col is the
// column at fault on error.
func (d *Decoder) appendCloudEvents(buf []byte, rel *relation, row []value, id []byte, at time.Time) (_ []byte, col int, err error) {
	ce := d.cols.CloudEvents
	start := 0
	put := func(key string) {
		d.hdrs = append(d.hdrs, outbox.Header{Key: key, Value: buf[start:len(buf):len(buf)]})
	}
	start, buf = len(buf), append(buf, "1.0"...)
	put("ce_specversion")
	d.hdrs = append(d.hdrs, outbox.Header{Key: "ce_id", Value: id})
	start, buf = len(buf), append(buf, ce.Source...)
	put("ce_source")
	start = len(buf)
	if buf, col, err = appendTemplate(buf, "CloudEvents type template", rel.ceType, row); err != nil {
		return buf, col, err
	}
	put("ce_type")
	start, buf = len(buf), at.UTC().AppendFormat(buf, time.RFC3339Nano)
	put("ce_time")
	start, buf = len(buf), append(buf, ce.ContentType...)
	put("content-type")
	return buf, -1, nil
}
