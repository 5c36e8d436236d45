package layout

import (
	"errors"
	"fmt"
	"slices"
	"strings"

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
// is looked at: a shape that does not exist or options of its that do not
// work, a topic template that does not parse, a header column listed
// twice, empty or named "id" (that header is the outbox id).
func (c Columns) Validate() error {
	var errs []error
	shape := c.Shape
	if shape == "" {
		shape = ShapePlain
	}
	if !slices.Contains(Shapes(), shape) {
		errs = append(errs, fmt.Errorf("shape %q: want one of %s", c.Shape, strings.Join(Shapes(), ", ")))
	}
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
		case shape == ShapeCloudEvents && ceReserved(h):
			errs = append(errs, fmt.Errorf("header columns: %q is set by CloudEvents", h))
		case seen[h]:
			errs = append(errs, fmt.Errorf("header columns: %q listed twice", h))
		}
		seen[h] = true
	}
	switch shape {
	case ShapeCloudEvents:
		errs = append(errs, c.CloudEvents.validate()...)
	case ShapeDebezium:
		errs = append(errs, c.Debezium.withDefaults().validate()...)
		if c.MessagePrefix != "" {
			errs = append(errs, errors.New("table-less events and the Debezium layout do not go together: the EventRouter reads a table"))
		}
	}
	errs = append(errs, c.ValidateTables()...)
	if c.MessagePrefix == ReservedMessagePrefix {
		errs = append(errs, fmt.Errorf("message prefix %q is outboxd's heartbeat's", c.MessagePrefix))
	}
	return errors.Join(errs...)
}
