package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/sqlquote"
)

// tableSettings are the column flags a table may set for itself in
// --table-columns. header-columns adds up over items (one column an item,
// as a list item cannot hold a comma).
const tableSettings = "id-column, topic-column, topic-template, key-column, no-key, payload-column, headers-column, timestamp-column, header-columns"

// parseTableColumns reads --table-columns' items, each
// TABLE:SETTING=VALUE (TABLE schema-qualified in SQL syntax, SETTING one
// of tableSettings), into tables' own mappings, with every problem found.
func parseTableColumns(items []string) (map[layout.TableName]layout.TableColumns, []string) {
	if len(items) == 0 {
		return nil, nil
	}
	out := map[layout.TableName]layout.TableColumns{}
	given := map[string]bool{} // table and setting, once each
	var problems []string
	for _, item := range items {
		table, setting, value, err := splitTableItem(item)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		parts, err := sqlquote.ParseQualified(table)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%q: %v", item, err))
			continue
		case len(parts) != 2:
			problems = append(problems, fmt.Sprintf("%q: write the table schema-qualified (public.%s)", item, table))
			continue
		}
		name := layout.TableName{Schema: parts[0], Name: parts[1]}
		key := name.String() + ":" + setting
		if given[key] && setting != "header-columns" {
			problems = append(problems, fmt.Sprintf("%q: %s of %s given twice", item, setting, name))
			continue
		}
		given[key] = true
		o := out[name]
		if msg := setTableColumn(&o, setting, value); msg != "" {
			problems = append(problems, fmt.Sprintf("%q: %s", item, msg))
			continue
		}
		out[name] = o
	}
	return out, problems
}

// splitTableItem splits TABLE:SETTING=VALUE at the first colon outside a
// quoted identifier and the first equals sign after it.
func splitTableItem(item string) (table, setting, value string, err error) {
	quoted := false
	for i := 0; i < len(item); i++ {
		switch c := item[i]; {
		case c == '"':
			quoted = !quoted
		case c == ':' && !quoted:
			setting, value, ok := strings.Cut(item[i+1:], "=")
			if !ok {
				break
			}
			return strings.TrimSpace(item[:i]), strings.TrimSpace(setting), strings.TrimSpace(value), nil
		}
	}
	return "", "", "", fmt.Errorf("%q: want TABLE:SETTING=VALUE, e.g. billing.outbox:id-column=event_id", item)
}

// setTableColumn sets the table's setting to value; a problem's text, or "".
func setTableColumn(o *layout.TableColumns, setting, value string) string {
	str := map[string]*string{"id-column": &o.ID, "topic-column": &o.Topic, "topic-template": &o.TopicTemplate,
		"key-column": &o.Key, "payload-column": &o.Payload, "headers-column": &o.Headers, "timestamp-column": &o.Timestamp}
	switch setting {
	case "no-key":
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Sprintf("no-key is true or false, not %q", value)
		}
		o.NoKey = &b
	case "header-columns":
		if o.HeaderColumns == nil {
			o.HeaderColumns = []string{}
		}
		if value != "" {
			o.HeaderColumns = append(o.HeaderColumns, value)
		}
	default:
		p, ok := str[setting]
		if !ok {
			return fmt.Sprintf("a table sets %s, not %s", tableSettings, setting)
		}
		if value == "" {
			return setting + " must not be empty"
		}
		*p = value
	}
	return ""
}
