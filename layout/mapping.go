package layout

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/outbox"
)

// roleTemplate is not a column role but the type rule of the columns a
// topic template reads (see accepted).
const roleTemplate = numRoles

// tmplPart is a piece of a topic template: literal text, or a placeholder
// naming a column (col and oid are its position and type in a table).
type tmplPart struct {
	literal string
	column  string // "" for literal text
	col     int
	oid     uint32
}

// parseTemplate splits a topic template into literal text and {column}
// placeholders. A brace that opens no placeholder, an unclosed or empty
// placeholder is an error: Kafka topic names cannot contain braces, so no
// escape is needed. A template without placeholders is one fixed topic.
func parseTemplate(what, tmpl string) ([]tmplPart, error) {
	var parts []tmplPart
	for rest := tmpl; rest != ""; {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			parts = append(parts, tmplPart{literal: rest})
			break
		}
		if rest[open] == '}' {
			return nil, fmt.Errorf("%s %q: '}' without '{'", what, tmpl)
		}
		if open > 0 {
			parts = append(parts, tmplPart{literal: rest[:open]})
		}
		end := strings.IndexAny(rest[open+1:], "{}")
		if end < 0 || rest[open+1+end] == '{' {
			return nil, fmt.Errorf("%s %q: '{' without '}'", what, tmpl)
		}
		name := rest[open+1 : open+1+end]
		if strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("%s %q: empty placeholder {}", what, tmpl)
		}
		parts = append(parts, tmplPart{column: name})
		rest = rest[open+1+end+1:]
	}
	return parts, nil
}

// Validate reports every problem of the mapping itself, before any table
// is looked at: a topic template that does not parse, a header column
// listed twice, empty or named "id" (that header is the outbox id).
func (c Columns) Validate() error {
	var errs []error
	if _, err := parseTemplate("topic template", c.TopicTemplate); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for _, h := range c.HeaderColumns {
		switch {
		case h == "":
			errs = append(errs, errors.New("header columns: empty column name"))
		case h == "id":
			errs = append(errs, errors.New(`header columns: "id" is reserved for the outbox id header`))
		case h == outbox.SourceHeader:
			errs = append(errs, errors.New(`header columns: "`+outbox.SourceHeader+`" is reserved for the record's source`))
		case h == outbox.TransactionalIDHeader:
			errs = append(errs, errors.New(`header columns: "`+outbox.TransactionalIDHeader+`" is reserved for outboxd's exactly-once progress records`))
		case c.CloudEvents != nil && ceReserved(h):
			errs = append(errs, fmt.Errorf("header columns: %q is set by CloudEvents", h))
		case seen[h]:
			errs = append(errs, fmt.Errorf("header columns: %q listed twice", h))
		}
		seen[h] = true
	}
	if c.CloudEvents != nil {
		errs = append(errs, c.CloudEvents.validate()...)
	}
	if dz := c.Debezium; dz != nil {
		errs = append(errs, dz.withDefaults().validate()...)
		if c.CloudEvents != nil {
			errs = append(errs, errors.New("CloudEvents and the Debezium layout do not go together: Debezium's records have no CloudEvents attributes"))
		}
		if c.MessagePrefix != "" {
			errs = append(errs, errors.New("table-less events and the Debezium layout do not go together: the EventRouter reads a table"))
		}
	}
	if c.MessagePrefix == ReservedMessagePrefix {
		errs = append(errs, fmt.Errorf("message prefix %q is outboxd's heartbeat's", c.MessagePrefix))
	}
	return errors.Join(errs...)
}

// appendText appends a column value's text form: a text-format value as
// sent; a binary one for the types that have an obvious text form
// (integers, uuid, text, json), an error for any other.
func appendText(buf []byte, v outbox.Value, oid uint32) ([]byte, error) {
	if v.Format == outbox.ValueText {
		return append(buf, v.Data...), nil
	}
	switch oid {
	case oidInt8, oidInt4, oidInt2:
		return appendID(buf, v, oid)
	case oidUUID:
		if len(v.Data) != 16 {
			return buf, fmt.Errorf("binary uuid is %d bytes, want 16", len(v.Data))
		}
		return appendUUID(buf, v.Data), nil
	case oidText, oidVarchar, oidJSON:
		return append(buf, v.Data...), nil
	case oidJSONB:
		raw, err := jsonText(v, oid)
		if err != nil {
			return buf, err
		}
		return append(buf, raw...), nil
	}
	return buf, fmt.Errorf("binary value of %s has no text form here", describeType(oid))
}

// typeMap returns pgx's codecs, made when first needed.
func (l *Layout) typeMap() *pgtype.Map {
	if l.types == nil {
		l.types = pgtype.NewMap()
	}
	return l.types
}

// parseTimestamp reads a timestamptz or timestamp value (text as the
// walsender's DateStyle ISO writes it, or binary) with pgx's codecs; a
// timestamp without time zone is UTC. infinity is an error: a record
// timestamp is a finite time.
func (l *Layout) parseTimestamp(v outbox.Value, oid uint32) (time.Time, error) {
	l.typeMap()
	format := int16(pgtype.TextFormatCode)
	if v.Format == outbox.ValueBinary {
		format = pgtype.BinaryFormatCode
	}
	var ts pgtype.Timestamptz
	if oid == oidTimestamp {
		var t pgtype.Timestamp
		if err := l.types.Scan(oid, format, v.Data, &t); err != nil {
			return time.Time{}, fmt.Errorf("timestamp %s: %w", quoteShort(v.Data), err)
		}
		ts = pgtype.Timestamptz{Time: t.Time, InfinityModifier: t.InfinityModifier, Valid: t.Valid}
	} else if err := l.types.Scan(oid, format, v.Data, &ts); err != nil {
		return time.Time{}, fmt.Errorf("timestamp %s: %w", quoteShort(v.Data), err)
	}
	if ts.InfinityModifier != pgtype.Finite {
		return time.Time{}, fmt.Errorf("timestamp %s is not a finite time", quoteShort(v.Data))
	}
	return ts.Time, nil
}
