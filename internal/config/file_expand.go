package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// envVarName is what ${NAME} may name.
var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expand replaces each ${NAME} in s with getenv(NAME) and each $$ with a
// single $; any other $ is itself. A variable that is unset or empty is an
// error naming it, and so is a ${ that names no variable: every problem of
// s at once. Errors never quote s, which may hold a secret around the
// variables.
func expand(s string, getenv func(string) string) (string, error) {
	var b strings.Builder
	var errs []string
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				errs = append(errs, "a ${ without its closing }: write $$ for a literal $")
				i = len(s)
				continue
			}
			name := s[i+2 : i+2+end]
			i += 2 + end
			switch {
			case !envVarName.MatchString(name):
				errs = append(errs, "a ${...} that names no environment variable (its name: letters, digits and _, not first a digit; not shown, in case the text is a secret): write $${ for the literal text ${")
			case getenv(name) == "" && name == "routedByValue":
				errs = append(errs, "environment variable routedByValue is not set or is empty: for Debezium's ${routedByValue} itself, write $${routedByValue}")
			case getenv(name) == "":
				errs = append(errs, fmt.Sprintf("environment variable %s is not set or is empty (for the literal text ${%s}, write $${%s})", name, name, name))
			default:
				b.WriteString(getenv(name))
			}
		default:
			b.WriteByte('$')
		}
	}
	if len(errs) > 0 {
		return "", errors.New(strings.Join(errs, "; "))
	}
	return b.String(), nil
}
