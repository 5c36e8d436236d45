package layout

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// TableName names a table by its schema and name, as they are (unquoted).
type TableName struct{ Schema, Name string }

// String writes the table as errors write it: schema.name, each part as
// SourceName writes it, so that no two tables read the same.
func (n TableName) String() string { return SourceName(n.Schema) + "." + SourceName(n.Name) }

// TableColumns is one table's own column mapping, for a publication whose
// tables are not all of one shape: each setting given replaces the
// pipeline's for this table's rows; what it leaves empty (nil) is the
// pipeline's. The shape and its options stay the pipeline's.
type TableColumns struct {
	ID, Key, Payload, Headers, Timestamp string
	// Topic and TopicTemplate: either replaces both of the pipeline's (a
	// table may take its topic from a column where the pipeline builds it
	// from a template, and the other way round).
	Topic, TopicTemplate string
	NoKey                *bool    // nil: the pipeline's
	HeaderColumns        []string // nil: the pipeline's; empty, not nil: none
}

// empty reports whether o replaces nothing.
func (o TableColumns) empty() bool {
	return o.ID == "" && o.Key == "" && o.Payload == "" && o.Headers == "" && o.Timestamp == "" &&
		o.Topic == "" && o.TopicTemplate == "" && o.NoKey == nil && o.HeaderColumns == nil
}

// For returns the mapping of the table schema.name: c with the table's own
// settings (Columns.Tables) in place of the pipeline's, and no Tables.
// Fill its defaults (WithDefaults) after, not before.
func (c Columns) For(schema, name string) Columns {
	o, ok := c.Tables[TableName{schema, name}]
	c.Tables = nil
	if !ok {
		return c
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.ID, o.ID)
	set(&c.Key, o.Key)
	set(&c.Payload, o.Payload)
	set(&c.Headers, o.Headers)
	set(&c.Timestamp, o.Timestamp)
	switch {
	case o.TopicTemplate != "":
		c.Topic, c.TopicTemplate = "", o.TopicTemplate
	case o.Topic != "":
		c.Topic, c.TopicTemplate = o.Topic, ""
	}
	if o.NoKey != nil {
		c.NoKey = *o.NoKey // no key dropped the key column: WithDefaults gives it again
	}
	if o.HeaderColumns != nil {
		c.HeaderColumns = o.HeaderColumns
	}
	return c
}

// ValidateTables reports the problems of the tables' own mappings: each as
// Validate reports the pipeline's (the table named), and what the shape
// decides itself (the Debezium layout routes and places headers).
func (c Columns) ValidateTables() []error {
	if len(c.Tables) == 0 {
		return nil
	}
	names := make([]TableName, 0, len(c.Tables))
	for n := range c.Tables {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b TableName) int { return cmp.Compare(a.String(), b.String()) })
	base := c
	base.Tables = nil
	var pipeline []string
	for _, err := range problems(base.Validate()) {
		pipeline = append(pipeline, err.Error())
	}
	var errs []error
	for _, n := range names {
		o := c.Tables[n]
		var own []error
		switch {
		case n.Schema == "" || n.Name == "":
			own = append(own, errors.New("want a schema-qualified table"))
		case o.empty():
			own = append(own, errors.New("no setting given"))
		}
		if o.Topic != "" && o.TopicTemplate != "" {
			own = append(own, errors.New("a topic column and a topic template: give one"))
		}
		if o.NoKey != nil && *o.NoKey && o.Key != "" {
			own = append(own, errors.New("a key column and no key: give one"))
		}
		if c.Shape == ShapeDebezium && (o.Topic != "" || o.TopicTemplate != "" || o.Headers != "" || o.HeaderColumns != nil) {
			own = append(own, errors.New("the Debezium layout routes and places headers itself: a table's own topic, headers column or header columns do not apply"))
		}
		for _, err := range problems(c.For(n.Schema, n.Name).Validate()) {
			if !slices.Contains(pipeline, err.Error()) { // the pipeline's own are reported once, as its
				own = append(own, err)
			}
		}
		if len(own) > 0 {
			errs = append(errs, fmt.Errorf("the columns of table %s: %w", n, errors.Join(own...)))
		}
	}
	return errs
}

// Unpublished returns the tables with their own mapping that are not among
// published, in name order: a name that reads no table's rows is most
// likely a slip in it.
func (c Columns) Unpublished(published []TableName) []TableName {
	var out []TableName
	for n := range c.Tables {
		if !slices.Contains(published, n) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b TableName) int { return cmp.Compare(a.String(), b.String()) })
	return out
}

// problems are the problems err joins (errors.Join), or err alone.
func problems(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
