package sqlquote_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/lib/sqlquote"
)

func TestParseQualified(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want pgx.Identifier
		err  string
	}{
		{"outbox", pgx.Identifier{"outbox"}, ""},
		{"public.outbox", pgx.Identifier{"public", "outbox"}, ""},
		{"App.OutBox", pgx.Identifier{"app", "outbox"}, ""},
		{`"App"."Out.Box"`, pgx.Identifier{"App", "Out.Box"}, ""},
		{`"a""b".t`, pgx.Identifier{`a"b`, "t"}, ""},
		{`"x$migration$y"`, pgx.Identifier{"x$migration$y"}, ""},
		{"t$1", pgx.Identifier{"t$1"}, ""},
		{"", nil, "empty name"},
		{"a.", nil, "empty name"},
		{".a", nil, "empty name"},
		{"a.b.c", nil, "more than schema.table"},
		{`"unterminated`, nil, "unterminated"},
		{`""`, nil, "empty quoted name"},
		{"1abc", nil, "unexpected"},
		{"a b", nil, "unexpected"},
		{"a;drop table x", nil, "unexpected"},
		{"x$migration$", nil, ""}, // $ inside an unquoted name is valid SQL
		{`"a"b`, nil, "unexpected"},
		{strings.Repeat("x", 64), nil, "longer than 63"},
	}
	for _, tt := range tests {
		got, err := sqlquote.ParseQualified(tt.in)
		switch {
		case tt.err == "" && tt.want == nil:
			if err != nil {
				t.Errorf("ParseQualified(%q): %v", tt.in, err)
			}
		case tt.err == "":
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ParseQualified(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseQualified(%q) = %q, %v; want an error with %q", tt.in, got, err, tt.err)
			}
		}
	}
}

func TestLiteral(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":             "''",
		"it's":         "'it''s'",
		`a\'; drop --`: `'a\''; drop --'`,
		"$migration$":  "'$migration$'",
		"''":           "''''''",
	} {
		if got := sqlquote.Literal(in); got != want {
			t.Errorf("Literal(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzQuoting checks the invariant of the package on any input: a literal
// and an identifier read back (by an SQL lexer's rules) as the input, and a
// parsed name quoted again parses to the same parts.
func FuzzQuoting(f *testing.F) {
	for _, s := range []string{"outbox", `"a""b"."c"`, "it's", "$x$", `a.b`, `"."`, "Ü.ß", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, ok := readQuoted(sqlquote.Literal(s), '\''); !ok || got != s {
			t.Fatalf("Literal(%q) reads back as %q (ok %v)", s, got, ok)
		}
		// pgx drops NUL bytes from identifiers: PostgreSQL cannot hold them.
		if got, ok := readQuoted(sqlquote.Identifier(s), '"'); !ok || got != strings.ReplaceAll(s, "\x00", "") {
			t.Fatalf("Identifier(%q) reads back as %q (ok %v)", s, got, ok)
		}
		parts, err := sqlquote.ParseQualified(s)
		if err != nil {
			return
		}
		again, err := sqlquote.ParseQualified(parts.Sanitize())
		if err != nil || !slices.Equal(again, parts) {
			t.Fatalf("ParseQualified(%q) = %q, but its quoted form %s parses as %q, %v", s, parts, parts.Sanitize(), again, err)
		}
	})
}

// readQuoted reads one token quoted with q the way PostgreSQL's lexer does
// (a doubled quote stands for one) and reports whether it spans all of s.
func readQuoted(s string, q byte) (string, bool) {
	if len(s) < 2 || s[0] != q {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != q {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == q {
			b.WriteByte(q)
			i++
			continue
		}
		return b.String(), i == len(s)-1
	}
	return "", false
}
