package layout

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/outbox"
)

// Debezium makes records as Debezium 3.6.1's outbox EventRouter
// (io.debezium.transforms.outbox.EventRouter) does from the same table,
// with the PostgreSQL connector (pgoutput), extended.headers.enabled=false
// and SimpleHeaderConverter, the key and value written by the converter
// KeyConverter and ValueConverter name, so that a team can replace Kafka
// Connect by outboxd and change nothing downstream:
//   - topic: RouteTopicReplacement with ${routedByValue} replaced by the
//     RouteByField column's value (an empty value too: "outbox.event.");
//   - key: the key column (Columns.Key, default aggregateid);
//   - value: the payload column (default payload); with the JSON
//     converter the JSON string of its text, or with ExpandJSONPayload the
//     payload expanded (see debezium_json.go); NULL: a tombstone with the
//     string converter, `null` with the JSON one;
//   - headers: id (the id column, default id: a uuid), outboxd's own
//     outbox.SourceHeader when Columns.Source is set (Debezium has no such
//     header: the comparisons leave outboxd.* headers out), then each
//     AdditionalPlacement column in order, under its alias, written as
//     SimpleHeaderConverter writes Debezium's value of it (a timestamptz
//     as UTC ISO-8601 to the column's precision, a timestamp as epoch
//     micro- or milliseconds, bytea as base64);
//   - timestamp: the commit time (Debezium's is when it processed the
//     event, which no other process can reproduce), or Columns.Timestamp.
//
// What differs, and why, is listed in README.md ("Replacing Debezium's
// outbox EventRouter"); docs/debezium has the recorded comparison.
type Debezium struct {
	// RouteByField is route.by.field: the column whose value routes the
	// record. Default "aggregatetype".
	RouteByField string
	// RouteTopicReplacement is route.topic.replacement: the topic, with
	// ${routedByValue} for RouteByField's value. Default
	// "outbox.event.${routedByValue}".
	RouteTopicReplacement string
	// AdditionalPlacement is table.fields.additional.placement: columns
	// placed as headers ("type:header:eventType"; only header placement is
	// supported: envelope and partition placement are refused).
	AdditionalPlacement []Placement
	// ExpandJSONPayload is table.expand.json.payload; it needs the JSON
	// value converter (with the string converter Debezium writes a Java
	// object's toString). Default false.
	ExpandJSONPayload bool
	// KeyConverter and ValueConverter are the worker's key.converter and
	// value.converter: ConverterString (StringConverter, the default) or
	// ConverterJSON (JsonConverter with schemas.enable=false).
	KeyConverter, ValueConverter string
	// TracingSpanContextField, when set, is a column holding a
	// java.util.Properties text with traceparent (and tracestate): they
	// are placed as headers of those names, as they are. Default "": off.
	TracingSpanContextField string
}

// Placement is one entry of table.fields.additional.placement: a column
// placed as a header named Alias.
type Placement struct{ Column, Alias string }

// The converters Debezium.KeyConverter and ValueConverter name.
const (
	ConverterString = "string" // org.apache.kafka.connect.storage.StringConverter
	ConverterJSON   = "json"   // org.apache.kafka.connect.json.JsonConverter, schemas.enable=false
)

// Defaults of Debezium.
const (
	DefaultRouteByField          = "aggregatetype"
	DefaultRouteTopicReplacement = "outbox.event.${routedByValue}"
	routedByValue                = "${routedByValue}"
)

// DebeziumColumns returns the column names of Debezium's default outbox
// table: id (uuid), aggregateid, payload; no headers column.
func DebeziumColumns() Columns {
	return Columns{ID: "id", Key: "aggregateid", Payload: "payload", Shape: ShapeDebezium}
}

// ParsePlacements parses table.fields.additional.placement:
// COLUMN:header[:ALIAS],... (the alias defaults to the column).
func ParsePlacements(s string) ([]Placement, error) {
	var out []Placement
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		parts := strings.Split(entry, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return nil, fmt.Errorf("additional placement %q: want COLUMN:header[:ALIAS]", entry)
		}
		switch parts[1] {
		case "header":
		case "envelope", "partition":
			return nil, fmt.Errorf("additional placement %q: %s placement is not supported (only header)", entry, parts[1])
		default:
			return nil, fmt.Errorf("additional placement %q: %q is not header, envelope or partition", entry, parts[1])
		}
		p := Placement{Column: parts[0], Alias: parts[0]}
		if len(parts) == 3 && parts[2] != "" {
			p.Alias = parts[2]
		}
		out = append(out, p)
	}
	return out, nil
}

// withDefaults fills Debezium's defaults.
func (dz Debezium) withDefaults() Debezium {
	if dz.RouteByField == "" {
		dz.RouteByField = DefaultRouteByField
	}
	if dz.RouteTopicReplacement == "" {
		dz.RouteTopicReplacement = DefaultRouteTopicReplacement
	}
	if dz.KeyConverter == "" {
		dz.KeyConverter = ConverterString
	}
	if dz.ValueConverter == "" {
		dz.ValueConverter = ConverterString
	}
	return dz
}

// topicTemplate is the replacement as a topic template over the route column.
func (dz Debezium) topicTemplate() string {
	return strings.ReplaceAll(dz.RouteTopicReplacement, routedByValue, "{"+dz.RouteByField+"}")
}

// validate reports every problem of the options.
func (dz Debezium) validate() []error {
	var errs []error
	rest := strings.ReplaceAll(dz.RouteTopicReplacement, routedByValue, "")
	if strings.ContainsAny(rest, "${}\\") {
		errs = append(errs, fmt.Errorf("route topic replacement %q: only ${routedByValue} may be replaced (no other group reference or escape)", dz.RouteTopicReplacement))
	}
	for what, c := range map[string]string{"key": dz.KeyConverter, "value": dz.ValueConverter} {
		if c != ConverterString && c != ConverterJSON {
			errs = append(errs, fmt.Errorf("%s converter %q: want %s or %s", what, c, ConverterString, ConverterJSON))
		}
	}
	if dz.ExpandJSONPayload && dz.ValueConverter != ConverterJSON {
		errs = append(errs, errors.New("expanding the JSON payload needs the json value converter (with the string converter Debezium writes a Java object's toString)"))
	}
	seen := map[string]bool{"id": true, outbox.SourceHeader: true} // the headers outboxd sets
	for _, p := range dz.AdditionalPlacement {
		if seen[p.Alias] {
			errs = append(errs, fmt.Errorf("additional placement: header %q twice (or one outboxd sets: id, %s)", p.Alias, outbox.SourceHeader))
		}
		seen[p.Alias] = true
	}
	return errs
}

// headerPlaceable reports whether a column type has a header form here that
// is what SimpleHeaderConverter writes for Debezium's value of it.
func headerPlaceable(oid uint32) bool {
	switch oid {
	case oidText, oidVarchar, oidBPChar, oidInt2, oidInt4, oidInt8, oidUUID, oidBool, oidJSON, oidJSONB, oidBytea, oidTimestamptz, oidTimestamp, oidDate:
		return true
	}
	return false
}

// appendDebeziumHeader appends a placed column's header value.
func (b *Builder) appendDebeziumHeader(buf []byte, v outbox.Value, c outbox.Column) ([]byte, error) {
	if v.Format != outbox.ValueText {
		return buf, fmt.Errorf("binary value of %s: only text format is placed as a Debezium header", describeType(c.TypeOID))
	}
	switch c.TypeOID {
	case oidBool:
		switch string(v.Data) {
		case "t":
			return append(buf, "true"...), nil
		case "f":
			return append(buf, "false"...), nil
		}
		return buf, fmt.Errorf("boolean %s", quoteShort(v.Data))
	case oidBytea:
		raw, err := appendBytea(nil, v.Data)
		if err != nil {
			return buf, err
		}
		return base64.StdEncoding.AppendEncode(buf, raw), nil
	case oidTimestamptz, oidTimestamp, oidDate:
		return b.appendDebeziumTime(buf, v, c)
	}
	return append(buf, v.Data...), nil
}

// appendDebeziumTime appends a time column as Debezium's PostgreSQL
// connector (time.precision.mode=adaptive) and SimpleHeaderConverter give
// it: timestamptz as UTC ISO-8601 with as many fractional digits as the
// column's precision (6 when it has none); timestamp as epoch
// milliseconds for a precision up to 3, else microseconds; date as days
// since the epoch.
func (b *Builder) appendDebeziumTime(buf []byte, v outbox.Value, c outbox.Column) ([]byte, error) {
	var t time.Time
	var err error
	if c.TypeOID == oidDate {
		// pgx's codec reads every form PostgreSQL writes (BC, offsets
		// with seconds); infinity is refused, as for a timestamp column.
		var dt pgtype.Date
		if err = b.typeMap().Scan(c.TypeOID, pgtype.TextFormatCode, v.Data, &dt); err == nil && dt.InfinityModifier != pgtype.Finite {
			err = errors.New("not a finite date")
		}
		t = dt.Time
	} else {
		t, err = b.parseTimestamp(v, c.TypeOID)
	}
	if err != nil {
		return buf, fmt.Errorf("%s value %s: %w", typeName(c.TypeOID), quoteShort(v.Data), err)
	}
	precision := int(c.TypeMod)
	if precision < 0 || precision > 6 {
		precision = 6
	}
	switch c.TypeOID {
	case oidDate:
		return strconv.AppendInt(buf, t.Unix()/86400, 10), nil
	case oidTimestamp:
		if precision <= 3 {
			return strconv.AppendInt(buf, t.UnixMilli(), 10), nil
		}
		return strconv.AppendInt(buf, t.UnixMicro(), 10), nil
	}
	buf = t.UTC().AppendFormat(buf, "2006-01-02T15:04:05")
	if precision > 0 {
		frac := strconv.Itoa(t.Nanosecond()/1000 + 1000000)[1:] // six digits
		buf = append(append(buf, '.'), frac[:precision]...)
	}
	return append(buf, 'Z'), nil
}

// appendDebeziumKey appends the record key as the key converter writes it.
func (dz *Debezium) appendKey(buf []byte, key []byte, present, integer bool) []byte {
	if dz.KeyConverter == ConverterJSON {
		switch {
		case !present:
			return append(buf, "null"...)
		case integer: // JsonConverter writes an INT64 key as a number
			return append(buf, key...)
		}
		return appendJacksonString(buf, string(key))
	}
	return append(buf, key...)
}

// appendValue appends the record value as the value converter writes it.
// payload is the payload as outboxd would publish it (bytea decoded).
func (dz *Debezium) appendValue(buf, payload []byte, present bool, oid uint32) ([]byte, error) {
	if dz.ValueConverter != ConverterJSON {
		return append(buf, payload...), nil
	}
	switch {
	case !present:
		return append(buf, "null"...), nil
	case oid == oidBytea:
		return appendJacksonString(buf, base64.StdEncoding.EncodeToString(payload)), nil
	case dz.ExpandJSONPayload:
		return expandJSON(buf, payload)
	}
	return appendJacksonString(buf, string(payload)), nil
}

// tracingHeaders reads traceparent and tracestate from a
// java.util.Properties text (key=value, key: value or key value lines;
// # and ! comments), as Debezium's tracing column holds them.
func tracingHeaders(text []byte) []outbox.Header {
	var hs []outbox.Header
	for _, line := range strings.FieldsFunc(string(text), func(r rune) bool { return r == '\n' || r == '\r' }) {
		line = strings.TrimLeft(line, " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		i := strings.IndexAny(line, "=: \t\f")
		if i < 0 {
			continue
		}
		key := line[:i]
		val := strings.TrimLeft(line[i:], " \t\f")
		if val != "" && (val[0] == '=' || val[0] == ':') && (line[i] == ' ' || line[i] == '\t' || line[i] == '\f') {
			val = strings.TrimLeft(val[1:], " \t\f")
		} else if line[i] == '=' || line[i] == ':' {
			val = strings.TrimLeft(line[i+1:], " \t\f")
		}
		if key == "traceparent" || key == "tracestate" {
			hs = append(hs, outbox.Header{Key: key, Value: []byte(val)})
		}
	}
	return hs
}

// debezium is the Debezium shape (see Debezium): its own key and value
// converters, the additional placement's headers as Debezium's header
// converter writes them, and the tracing span context's headers.
type debezium struct {
	opts  Debezium // with defaults
	noKey bool     // Columns.NoKey
}

// Check checks the additional placement's columns (Columns.HeaderColumns,
// which the mapping found) and the tracing span context column.
func (s debezium) Check(t *Table) []error {
	var errs []error
	for i, at := range t.hdr {
		if at >= 0 && !headerPlaceable(t.Columns[at].TypeOID) {
			errs = append(errs, fmt.Errorf("table %s: additional placement column %q has %s, which outboxd cannot write as Debezium's header converter would",
				t.Table, s.opts.AdditionalPlacement[i].Column, describeType(t.Columns[at].TypeOID)))
		}
	}
	t.emptyTemplateValue = true
	if f := s.opts.TracingSpanContextField; f != "" {
		// Like Debezium, a table without the column has no trace context.
		if t.trace = findColumn(t.Columns, f); t.trace >= 0 && t.Columns[t.trace].TypeOID != oidText && t.Columns[t.trace].TypeOID != oidVarchar {
			errs = append(errs, fmt.Errorf("table %s: tracing span context column %q has %s, want text or character varying",
				t.Table, f, describeType(t.Columns[t.trace].TypeOID)))
		}
	}
	return errs
}

func (s debezium) Record(b *Builder, t *Table, row []outbox.Value) (outbox.Event, error) {
	dz := &s.opts
	ev, err := b.event(t, row)
	if err != nil {
		return ev, err
	}
	id, key, payload := t.val(row, roleID), t.val(row, roleKey), t.val(row, rolePayload)
	size := 40 + len(id.Data) + 2*len(key.Data) + 2*len(payload.Data) + len(t.source)
	for _, p := range t.hdr {
		size += 2 * len(row[p].Data)
	}
	buf, idValue, err := b.alloc(t, row, size)
	if err != nil {
		return outbox.Event{}, err
	}
	// With NoKey, no key at all: a JSON null would send every record to
	// one partition.
	if !s.noKey && (key.Present() || dz.KeyConverter == ConverterJSON) {
		k, err := appendKey(nil, key, t.oid[roleKey])
		if err != nil {
			return outbox.Event{}, b.rowError(t, row, t.pos[roleKey], err)
		}
		start := len(buf)
		integer := t.oid[roleKey] == oidInt8 || t.oid[roleKey] == oidInt4 || t.oid[roleKey] == oidInt2
		buf = dz.appendKey(buf, k, key.Present(), integer)
		ev.Key = buf[start:len(buf):len(buf)]
	}
	if payload.Present() || dz.ValueConverter == ConverterJSON {
		var raw []byte
		if payload.Present() {
			if raw, err = appendPayload(nil, payload, t.oid[rolePayload]); err != nil {
				return outbox.Event{}, b.rowError(t, row, t.pos[rolePayload], err)
			}
		}
		start := len(buf)
		if buf, err = dz.appendValue(buf, raw, payload.Present(), t.oid[rolePayload]); err != nil {
			return outbox.Event{}, b.rowError(t, row, t.pos[rolePayload], err)
		}
		ev.Value = buf[start:len(buf):len(buf)]
	}
	buf = b.headersFrom(buf, idValue, t.source)
	for i, p := range t.hdr {
		h := outbox.Header{Key: dz.AdditionalPlacement[i].Alias}
		if v := row[p]; v.Present() {
			start := len(buf)
			if buf, err = b.appendDebeziumHeader(buf, v, t.Columns[p]); err != nil {
				return outbox.Event{}, b.fail(t, row, p, fmt.Errorf("additional placement: %w", err))
			}
			h.Value = buf[start:len(buf):len(buf)]
		}
		b.hdrs = append(b.hdrs, h)
	}
	if t.trace >= 0 {
		if v := row[t.trace]; v.Present() {
			b.hdrs = append(b.hdrs, tracingHeaders(v.Data)...)
		}
	}
	return b.finish(ev), nil
}
