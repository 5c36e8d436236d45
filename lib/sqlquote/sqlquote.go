// Package sqlquote quotes and parses the SQL names and literals outboxd
// builds statements from. Every value from a flag or a row that ends up in
// SQL text goes through Literal, and every name through Identifier or
// pgx.Identifier's Sanitize (pgx's quoting, which Identifier wraps; a
// schema-qualified name parsed by ParseQualified is a pgx.Identifier):
// nothing else quotes SQL.
//
// Invariant: for any input, Literal and Identifier produce text that
// PostgreSQL reads back as exactly that input (no statement can be ended
// or extended by it), and ParseQualified accepts only what PostgreSQL would
// read as a one- or two-part name.
package sqlquote

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Literal quotes s as an SQL string literal: single quotes, with every
// single quote doubled. This is safe under standard_conforming_strings=on
// (the default since PostgreSQL 9.1), where backslashes have no meaning.
func Literal(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// Identifier quotes name as one SQL identifier (double quotes, with every
// double quote doubled), whatever characters it holds; NUL bytes, which
// PostgreSQL cannot store, are dropped.
func Identifier(name string) string {
	return pgx.Identifier{name}.Sanitize()
}

// ParseQualified parses a table name in SQL syntax: name or schema.name,
// where each part is an unquoted identifier (folded to lower case, as
// PostgreSQL does) or a double-quoted one (taken as written, "" standing
// for a double quote). It returns the parts, unquoted.
func ParseQualified(s string) (pgx.Identifier, error) {
	var parts pgx.Identifier
	i := 0
	for {
		part, next, err := parsePart(s, i)
		if err != nil {
			return nil, fmt.Errorf("table name %q: %w", s, err)
		}
		parts = append(parts, part)
		i = next
		if i == len(s) {
			break
		}
		if s[i] != '.' {
			return nil, fmt.Errorf("table name %q: unexpected %q at offset %d", s, s[i], i)
		}
		i++
		if len(parts) == 2 {
			return nil, fmt.Errorf("table name %q: more than schema.table", s)
		}
	}
	return parts, nil
}

// maxIdentifierLen is PostgreSQL's NAMEDATALEN - 1: longer names are
// truncated by the server, so two different flags could name one table.
const maxIdentifierLen = 63

func parsePart(s string, i int) (string, int, error) {
	if i >= len(s) {
		return "", i, errors.New("empty name")
	}
	if s[i] == '"' {
		var b strings.Builder
		for j := i + 1; j < len(s); j++ {
			if s[j] != '"' {
				b.WriteByte(s[j])
				continue
			}
			if j+1 < len(s) && s[j+1] == '"' {
				b.WriteByte('"')
				j++
				continue
			}
			name := b.String()
			switch {
			case name == "":
				return "", j, errors.New(`empty quoted name ""`)
			case strings.IndexByte(name, 0) >= 0:
				return "", j, errors.New("NUL byte in name")
			case len(name) > maxIdentifierLen:
				return "", j, fmt.Errorf("name %q is longer than %d bytes", name, maxIdentifierLen)
			}
			return name, j + 1, nil
		}
		return "", len(s), errors.New("unterminated quoted name")
	}
	j := i
	for j < len(s) && s[j] != '.' {
		c := s[j]
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 ||
			j > i && (c >= '0' && c <= '9' || c == '$')
		if !ok {
			return "", j, fmt.Errorf("unexpected %q at offset %d (quote names with other characters: \"My Table\")", c, j)
		}
		j++
	}
	if j == i {
		return "", j, errors.New("empty name")
	}
	name := strings.ToLower(s[i:j])
	if len(name) > maxIdentifierLen {
		return "", j, fmt.Errorf("name %q is longer than %d bytes", name, maxIdentifierLen)
	}
	return name, j, nil
}
