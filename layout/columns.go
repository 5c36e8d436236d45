package layout

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxd/outboxd/outbox"
)

// Columns maps the columns of the tables in the publication to the parts of
// a record. An empty name means its default (see [DefaultColumns]); the
// zero Columns is the default outbox table. Check a mapping with
// [Columns.Validate] before use; a Layout with an invalid one treats every
// table as unusable.
type Columns struct {
	ID      string // bigint, integer, smallint, uuid, text or varchar: the id header, the idempotency key; default "id"
	Topic   string // text/varchar; default "topic"; not used with TopicTemplate
	Key     string // uuid/text/varchar or an integer (its decimal text); default "aggregate_id"; not read with NoKey
	Payload string // jsonb/json/bytea/text/varchar; default "payload"
	Headers string // jsonb/json, nullable, optional column; default "headers"
	// NoKey publishes records without a key: Kafka spreads them over the
	// topic's partitions, so there is no per-aggregate order. Default
	// false: the Key column is the record key.
	NoKey bool
	// Timestamp is a timestamptz or timestamp column whose value is the
	// record timestamp (a timestamp without time zone is taken as UTC; a
	// NULL value falls back to the commit time). Default "": the commit time.
	Timestamp string
	// TopicTemplate builds the topic from columns instead of the topic
	// column: literal text with {column} placeholders, each replaced by the
	// column's text form, e.g. "orders.{aggregatetype}". A placeholder
	// column is text, varchar, uuid or an integer; NULL or empty in a row
	// is a *outbox.RowError. Default "": the topic column.
	TopicTemplate string
	// HeaderColumns are placed as record headers after the id header, each
	// named after its column, its value the column's text form (NULL: a
	// header with a null value). Default none.
	HeaderColumns []string
	// Shape names what a row becomes (see Shape): ShapePlain (the
	// default, ""), ShapeCloudEvents or ShapeDebezium. Each reads its own
	// options below and no other's.
	Shape string
	// CloudEvents are the options of ShapeCloudEvents: every record a
	// CloudEvent in the Kafka protocol binding's binary content mode, and
	// table-less events too.
	CloudEvents CloudEvents
	// MessagePrefix, when set, also makes an event of every transactional
	// logical decoding message with exactly this prefix (table-less
	// events: pg_logical_emit_message(true, prefix, envelope), see
	// envelope.go); the stream must be started with messages 'true'.
	// Default "": messages are ignored.
	MessagePrefix string
	// Debezium are the options of ShapeDebezium, records as Debezium's
	// outbox EventRouter makes them (--layout debezium): its topic routing
	// replaces Topic and TopicTemplate, its additional placement
	// HeaderColumns, and there is no headers column.
	Debezium Debezium
	// Source is the server's system identifier and database,
	// "<system identifier>/<database>", naming where the events come from
	// (cdc sets it for every session and backfill from IDENTIFY_SYSTEM).
	// When set, every record gets a outbox.SourceHeader right after the id
	// header, its value Source + "/" + the event's table (schema "."
	// table, each as SourceName writes it, or "message:<prefix>" for a
	// table-less event), computed once per Relation message. Build the
	// database part with SourceName too. Default "": no header.
	Source string
	// ReservedTopics are topics no record may name: outboxd's own progress
	// and dead-letter topics. A row or message naming one of them, or a
	// Kafka internal topic (a name beginning with "__", always refused), is
	// a *outbox.RowError: a record there could forge outboxd's state (a progress
	// record skips events at the next start) or be taken for a dead letter.
	// Default none besides the internal topics.
	ReservedTopics []string
	// Tables are tables' own mappings, for a publication over tables of
	// more than one shape: a table listed here takes its own settings in
	// place of the ones above (see TableColumns, Columns.For); the others
	// take these. Default none.
	Tables map[TableName]TableColumns
}

// ReservedMessagePrefix is the prefix of outboxd's own heartbeat messages,
// never one of events.
const ReservedMessagePrefix = "outboxd.heartbeat"

// DefaultColumns returns the column names of the default outbox table.
func DefaultColumns() Columns {
	return Columns{ID: "id", Topic: "topic", Key: "aggregate_id", Payload: "payload", Headers: "headers"}
}

// WithDefaults fills empty names with the defaults (no topic column when
// there is a topic template).
func (c Columns) WithDefaults() Columns {
	d := DefaultColumns()
	if c.Shape == "" {
		c.Shape = ShapePlain
	}
	if c.ID == "" {
		c.ID = d.ID
	}
	if c.Shape == ShapeCloudEvents && c.CloudEvents.ContentType == "" {
		c.CloudEvents.ContentType = DefaultCloudEventsContentType
	}
	switch {
	case c.TopicTemplate != "":
		c.Topic = "" // the template replaces the column
	case c.Topic == "":
		c.Topic = d.Topic
	}
	switch {
	case c.NoKey:
		c.Key = "" // no key column: every record's key is null
	case c.Key == "":
		c.Key = d.Key
	}
	if c.Payload == "" {
		c.Payload = d.Payload
	}
	if c.Headers == "" {
		c.Headers = d.Headers
	}
	if c.Shape == ShapeDebezium {
		dz := c.Debezium.withDefaults()
		c.Debezium = dz
		c.Topic, c.TopicTemplate = "", dz.topicTemplate()
		c.Headers = "" // Debezium reads no headers column
		c.HeaderColumns = nil
		for _, p := range dz.AdditionalPlacement {
			c.HeaderColumns = append(c.HeaderColumns, p.Column)
		}
	}
	return c
}

// The roles an outbox column plays, used as indexes.
const (
	roleID = iota
	roleTopic
	roleKey
	rolePayload
	roleHeaders
	roleTimestamp
	numRoles
)

// roleName names a role in error messages.
func roleName(role int) string {
	return [numRoles]string{"id", "topic", "key", "payload", "headers", "timestamp"}[role]
}

// names gives each role its column name; "" for a role not mapped.
func (c Columns) names() [numRoles]string {
	return [numRoles]string{c.ID, c.Topic, c.Key, c.Payload, c.Headers, c.Timestamp}
}

// optional reports whether a table may lack the role's column: the headers
// column may be absent; a timestamp column, once named, may not.
func optional(role int) bool { return role == roleHeaders }

// Type OIDs of the built-in types the outbox columns may have.
const (
	oidBytea   = pgtype.ByteaOID
	oidInt8    = pgtype.Int8OID
	oidInt2    = pgtype.Int2OID
	oidInt4    = pgtype.Int4OID
	oidText    = pgtype.TextOID
	oidJSON    = pgtype.JSONOID
	oidVarchar = pgtype.VarcharOID
	oidUUID    = pgtype.UUIDOID
	oidJSONB   = pgtype.JSONBOID
	oidBPChar  = pgtype.BPCharOID
	oidBool    = pgtype.BoolOID
	oidDate    = pgtype.DateOID

	oidTimestamp   = pgtype.TimestampOID
	oidTimestamptz = pgtype.TimestamptzOID
)

// accepted lists, per role, the column types that role accepts.
func accepted(role int) []uint32 {
	switch role {
	case roleID:
		return []uint32{oidInt8, oidInt4, oidInt2, oidUUID, oidText, oidVarchar}
	case roleTopic:
		return []uint32{oidText, oidVarchar}
	case roleKey:
		return []uint32{oidUUID, oidText, oidVarchar, oidInt8, oidInt4, oidInt2}
	case rolePayload:
		return []uint32{oidJSONB, oidJSON, oidBytea, oidText, oidVarchar}
	case roleHeaders:
		return []uint32{oidJSONB, oidJSON}
	case roleTimestamp:
		return []uint32{oidTimestamptz, oidTimestamp}
	case roleTemplate:
		return []uint32{oidText, oidVarchar, oidUUID, oidInt8, oidInt4, oidInt2}
	}
	return nil
}

// typeName names the built-in types an outbox table is likely to use, as
// SQL and psql's \d write them (bigint, character varying): pgtype knows
// only the internal names (int8, varchar). Other types are named by OID only.
func typeName(oid uint32) string {
	switch oid {
	case pgtype.BoolOID:
		return "boolean"
	case oidBytea:
		return "bytea"
	case pgtype.QCharOID:
		return "char"
	case pgtype.NameOID:
		return "name"
	case oidInt8:
		return "bigint"
	case oidInt2:
		return "smallint"
	case oidInt4:
		return "integer"
	case oidText:
		return "text"
	case oidJSON:
		return "json"
	case pgtype.Float4OID:
		return "real"
	case pgtype.Float8OID:
		return "double precision"
	case pgtype.BPCharOID:
		return "character"
	case oidVarchar:
		return "character varying"
	case pgtype.DateOID:
		return "date"
	case pgtype.TimestampOID:
		return "timestamp without time zone"
	case pgtype.TimestamptzOID:
		return "timestamp with time zone"
	case pgtype.NumericOID:
		return "numeric"
	case oidUUID:
		return "uuid"
	case oidJSONB:
		return "jsonb"
	}
	return ""
}

func describeType(oid uint32) string {
	if n := typeName(oid); n != "" {
		return "type " + n + " (oid " + strconv.FormatUint(uint64(oid), 10) + ")"
	}
	return "type oid " + strconv.FormatUint(uint64(oid), 10)
}

func describeAccepted(oids []uint32) string {
	names := make([]string, len(oids))
	for i, o := range oids {
		names[i] = typeName(o)
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// plan is where a table keeps the parts of a record: the result of
// checking a mapping against its columns.
type plan struct {
	pos  [numRoles]int    // per role: its column position, or -1 (absent or not mapped)
	oid  [numRoles]uint32 // per role: the column's type OID
	tmpl []tmplPart       // the topic template, its placeholders resolved to positions; nil: the topic column
	hdr  []int            // per Columns.HeaderColumns: its column position
	// What a shape's Check notes besides: the CloudEvents type template,
	// resolved (nil without CloudEvents); Debezium's tracing span context
	// column (-1: none); whether a topic template's placeholder may be
	// empty (Debezium routes an empty aggregatetype to "outbox.event.").
	ceType             []tmplPart
	trace              int
	emptyTemplateValue bool
}

// locate finds the columns of the mapping want (with defaults, valid) in
// cols and reports every problem: a name mapped to two roles, a missing
// column, a column whose type its role does not accept, a missing
// placeholder or header column. What a shape needs besides, its Check
// checks.
func locate(table string, cols []outbox.Column, want Columns) (l plan, errs []error) {
	names := want.names()
	for r, name := range names {
		l.pos[r] = -1
		if name == "" {
			continue
		}
		for o := 0; o < r; o++ {
			if names[o] == name {
				errs = append(errs, fmt.Errorf("table %s: column %q is configured as both the %s and the %s column",
					table, name, roleName(o), roleName(r)))
			}
		}
		if l.pos[r] = findColumn(cols, name); l.pos[r] < 0 {
			if !optional(r) {
				errs = append(errs, fmt.Errorf("table %s: missing %s column %q", table, roleName(r), name))
			}
			continue
		}
		l.oid[r] = cols[l.pos[r]].TypeOID
		if err := checkType(table, roleName(r)+" column", r, cols[l.pos[r]]); err != nil {
			errs = append(errs, err)
		}
	}
	var terrs []error
	l.tmpl, terrs = resolveTemplate(table, cols, "topic template", want.TopicTemplate)
	errs = append(errs, terrs...)
	for _, name := range want.HeaderColumns {
		at := findColumn(cols, name)
		if at < 0 {
			errs = append(errs, fmt.Errorf("table %s: missing header column %q", table, name))
		}
		l.hdr = append(l.hdr, at)
	}
	l.trace = -1
	return l, errs
}

// findColumn is the position of the column called name, or -1.
func findColumn(cols []outbox.Column, name string) int {
	for i, c := range cols {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// checkType refuses a column whose type role does not accept.
func checkType(table, what string, role int, c outbox.Column) error {
	for _, a := range accepted(role) {
		if a == c.TypeOID {
			return nil
		}
	}
	return fmt.Errorf("table %s: %s %q has %s, want %s", table, what, c.Name, describeType(c.TypeOID), describeAccepted(accepted(role)))
}

// resolveTemplate parses a template (valid: Columns.Validate checked it)
// and finds each placeholder's column in cols; a missing column, or one
// of a type a placeholder cannot read, is a problem.
func resolveTemplate(table string, cols []outbox.Column, what, tmpl string) (out []tmplPart, errs []error) {
	parts, _ := parseTemplate(what, tmpl)
	for _, p := range parts {
		if p.column != "" {
			if p.col = findColumn(cols, p.column); p.col < 0 {
				errs = append(errs, fmt.Errorf("table %s: missing column %q of the %s", table, p.column, what))
				continue
			}
			p.oid = cols[p.col].TypeOID
			if err := checkType(table, what+" column", roleTemplate, cols[p.col]); err != nil {
				errs = append(errs, err)
			}
		}
		out = append(out, p)
	}
	return out, errs
}
