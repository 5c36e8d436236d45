package layout

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// requireCloudEvent checks a record's headers against the CloudEvents 1.0
// specification's required attributes in the Kafka protocol binding's
// binary content mode (ce_ prefixed headers, content-type for the data's
// media type): id, source (a URI-reference), specversion 1.0 and type
// present and non-empty, each once; time, when present, RFC 3339.
func requireCloudEvent(t *testing.T, hs []outbox.Header) map[string]string {
	t.Helper()
	attrs := map[string]string{}
	for _, h := range hs {
		if strings.HasPrefix(h.Key, "ce_") || h.Key == "content-type" {
			if _, dup := attrs[h.Key]; dup {
				t.Errorf("header %s appears twice", h.Key)
			}
			attrs[h.Key] = string(h.Value)
		}
	}
	for _, req := range []string{"ce_id", "ce_source", "ce_specversion", "ce_type"} {
		if attrs[req] == "" {
			t.Errorf("required attribute %s missing or empty in %s", req, showHeaders(hs))
		}
	}
	if attrs["ce_specversion"] != "1.0" {
		t.Errorf("ce_specversion %q, want 1.0", attrs["ce_specversion"])
	}
	if _, err := url.Parse(attrs["ce_source"]); err != nil {
		t.Errorf("ce_source %q is not a URI-reference: %v", attrs["ce_source"], err)
	}
	if v, ok := attrs["ce_time"]; ok {
		if _, err := time.Parse(time.RFC3339, v); err != nil {
			t.Errorf("ce_time %q is not RFC 3339: %v", v, err)
		}
	}
	return attrs
}

// ceInsert encodes an insert into the events table with a headers column
// (meta) after its columns.
func ceInsert(typ, occurred, meta tv) []byte {
	return encInsert(eventsRelID, text("7"), text("order"), text("o-1"), typ, text(`{}`), text("acme"), occurred, null, meta)
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func ceMapping() Columns {
	return Columns{ID: "seq", Key: "aggregateid", TopicTemplate: "{aggregatetype}", HeaderColumns: []string{"tenant"}, Headers: "meta",
		Timestamp: "occurred_at", Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Source: "/orders", Type: "com.example.{type}"}}
}

func ceDecoder(t *testing.T, m Columns) *Decoder {
	t.Helper()
	d := NewDecoder(m)
	decodeAll(t, d, encRelation(eventsRelID, "public", "events", append(eventsColumns(), Column{Name: "meta", TypeOID: oidJSONB})...), testBegin())
	return d
}

func TestDecodeCloudEvents(t *testing.T) {
	ts, meta := text("2026-11-30 22:15:01.25+00"), text(`{"traceparent": "`+traceparent+`", "tracestate": "congo=t61rcWkgMzE"}`)
	tests := []struct {
		name    string
		mapping func(*Columns)
		insert  []byte
		want    []outbox.Header
	}{
		{
			name:   "type from a template, time from the timestamp column, trace context passed through",
			insert: ceInsert(text("OrderCreated"), ts, meta),
			want: []outbox.Header{hdr("id", "7"), hdr("ce_specversion", "1.0"), hdr("ce_id", "7"), hdr("ce_source", "/orders"),
				hdr("ce_type", "com.example.OrderCreated"), hdr("ce_time", "2026-11-30T22:15:01.25Z"), hdr("content-type", "application/json"),
				hdr("tenant", "acme"), hdr("traceparent", traceparent), hdr("tracestate", "congo=t61rcWkgMzE")},
		},
		{
			name: "fixed type, commit time, own content type, extension attribute",
			mapping: func(c *Columns) {
				c.Shape, c.CloudEvents = ShapeCloudEvents, CloudEvents{Source: "https://example.com/orders", Type: "com.example.event", ContentType: "text/plain"}
				c.Timestamp = ""
			},
			insert: ceInsert(text("OrderCreated"), ts, text(`{"ce_subject": "o-1"}`)),
			want: []outbox.Header{hdr("id", "7"), hdr("ce_specversion", "1.0"), hdr("ce_id", "7"), hdr("ce_source", "https://example.com/orders"),
				hdr("ce_type", "com.example.event"), hdr("ce_time", "2026-01-02T03:04:05.123456Z"), hdr("content-type", "text/plain"),
				hdr("tenant", "acme"), hdr("ce_subject", "o-1")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ceMapping()
			if tt.mapping != nil {
				tt.mapping(&m)
			}
			if err := m.Validate(); err != nil {
				t.Fatal(err)
			}
			got, err := ceDecoder(t, m).Decode(tt.insert)
			if err != nil {
				t.Fatal(err)
			}
			if diff := showHeaders(got.Event.Headers); diff != showHeaders(tt.want) {
				t.Errorf("headers\n%s\nwant\n%s", diff, showHeaders(tt.want))
			}
			requireCloudEvent(t, got.Event.Headers)
		})
	}
}

func TestDecodeCloudEventsRowErrors(t *testing.T) {
	tests := []struct {
		name, column, err string
		insert            []byte
	}{
		{"NULL in the type template", "type", "null value in the CloudEvents type template", ceInsert(null, null, null)},
		{"empty value in the type template", "type", "empty value in the CloudEvents type template", ceInsert(text(""), null, null)},
		{"the headers object sets a CloudEvents attribute", "meta", `header "ce_type" is set by CloudEvents`, ceInsert(text("T"), null, text(`{"ce_type": "x"}`))},
		{"the headers object sets the content type", "meta", `header "content-type" is set by CloudEvents`, ceInsert(text("T"), null, text(`{"content-type": "x"}`))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ceDecoder(t, ceMapping()).Decode(tt.insert)
			var re *RowError
			if !errors.As(err, &re) || re.Column != tt.column || !strings.Contains(re.Err.Error(), tt.err) || re.ID != "7" {
				t.Fatalf("error %v, want a *RowError for outbox id 7, column %q: %s", err, tt.column, tt.err)
			}
		})
	}
}

func TestCloudEventsValidate(t *testing.T) {
	c := Columns{HeaderColumns: []string{"ce_id"}, Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Type: "x.{"}}
	err := c.Validate()
	for _, want := range []string{`header columns: "ce_id" is set by CloudEvents`, "CloudEvents source: required", `CloudEvents type template "x.{": '{' without '}'`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to say %s", err, want)
		}
	}
	if err := (Columns{Shape: ShapeCloudEvents, CloudEvents: CloudEvents{Source: "/s"}}).Validate(); err == nil || !strings.Contains(err.Error(), "CloudEvents type: required") {
		t.Errorf("Validate without a type = %v", err)
	}
	if err := (Columns{HeaderColumns: []string{"ce_id"}}).Validate(); err != nil {
		t.Errorf("ce_id is an ordinary header column without CloudEvents: %v", err)
	}
}
