package decode

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
)

// Columns names the outbox columns of the tables in the publication.
// An empty field means its default (see [DefaultColumns]).
type Columns struct {
	ID      string // bigint/int/smallint, the idempotency key; default "id"
	Topic   string // text/varchar; default "topic"
	Key     string // uuid/text/varchar; default "aggregate_id"
	Payload string // jsonb/json/bytea/text/varchar; default "payload"
	Headers string // jsonb/json, nullable, optional column; default "headers"
}

// DefaultColumns returns the column names of the default outbox table.
func DefaultColumns() Columns {
	return Columns{ID: "id", Topic: "topic", Key: "aggregate_id", Payload: "payload", Headers: "headers"}
}

// withDefaults fills empty names with the defaults.
func (c Columns) withDefaults() Columns {
	d := DefaultColumns()
	if c.ID == "" {
		c.ID = d.ID
	}
	if c.Topic == "" {
		c.Topic = d.Topic
	}
	if c.Key == "" {
		c.Key = d.Key
	}
	if c.Payload == "" {
		c.Payload = d.Payload
	}
	if c.Headers == "" {
		c.Headers = d.Headers
	}
	return c
}

// Column is one column of a relation as the catalog or a Relation message describes it.
type Column struct {
	Name    string
	TypeOID uint32
}

// The roles an outbox column plays, used as indexes.
const (
	roleID = iota
	roleTopic
	roleKey
	rolePayload
	roleHeaders
	numRoles
)

// roleName names a role in error messages.
func roleName(role int) string {
	return [numRoles]string{"id", "topic", "key", "payload", "headers"}[role]
}

func (c Columns) names() [numRoles]string {
	return [numRoles]string{c.ID, c.Topic, c.Key, c.Payload, c.Headers}
}

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
)

// accepted lists, per role, the column types that role accepts.
func accepted(role int) []uint32 {
	switch role {
	case roleID:
		return []uint32{oidInt8, oidInt4, oidInt2}
	case roleTopic:
		return []uint32{oidText, oidVarchar}
	case roleKey:
		return []uint32{oidUUID, oidText, oidVarchar}
	case rolePayload:
		return []uint32{oidJSONB, oidJSON, oidBytea, oidText, oidVarchar}
	case roleHeaders:
		return []uint32{oidJSONB, oidJSON}
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

// locate finds the position of each outbox column in cols (-1 when absent)
// and reports every problem: a name mapped to two roles, a missing required
// column, a column whose type the role does not accept.
func locate(table string, cols []Column, want Columns) (pos [numRoles]int, errs []error) {
	names := want.withDefaults().names()
	for r := range pos {
		pos[r] = -1
		for o := 0; o < r; o++ {
			if names[o] == names[r] {
				errs = append(errs, fmt.Errorf("table %s: column %q is configured as both the %s and the %s column",
					table, names[r], roleName(o), roleName(r)))
			}
		}
	}
	for r, name := range names {
		for i, c := range cols {
			if c.Name == name {
				pos[r] = i
				break
			}
		}
		if pos[r] < 0 {
			if r != roleHeaders {
				errs = append(errs, fmt.Errorf("table %s: missing %s column %q", table, roleName(r), name))
			}
			continue
		}
		oid := cols[pos[r]].TypeOID
		ok := false
		for _, a := range accepted(r) {
			ok = ok || a == oid
		}
		if !ok {
			errs = append(errs, fmt.Errorf("table %s: %s column %q has %s, want %s",
				table, roleName(r), name, describeType(oid), describeAccepted(accepted(r))))
		}
	}
	return pos, errs
}

// ValidateTable checks that a table has the outbox columns with usable types.
// table is schema-qualified. Returns an error naming the table and the column
// (missing, or its type name/oid and what is accepted). Reports every problem
// at once (errors.Join). Empty names in want mean their defaults; the headers
// column may be absent.
func ValidateTable(table string, cols []Column, want Columns) error {
	_, errs := locate(table, cols, want)
	return errors.Join(errs...)
}
