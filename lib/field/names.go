package field

import (
	"strings"
)

// Names renders the settings a component's messages name, by their field
// paths, as the one who configured it knows them: a command's flags
// ("--slot"), a pipelines file's keys ("slot"), or a library user's Go
// fields ("Stream.Slot", the zero Names). A component never writes a
// flag's name itself: it asks its Config's Names, which the command sets.
type Names struct {
	// Key is the user's name of the setting at path: a flag's name
	// without its dashes, or a file's key; "" when the user has none for
	// it (the path is shown). Nil: every setting is shown by its path.
	Key func(path string) string
	// Flags says the keys are a command's flags: a fix is a command line.
	// Otherwise they are a pipelines file's keys.
	Flags bool
	// path maps a field path of the Config these Names were handed to
	// to one of the Config Key knows (Under, Renamed); nil: the same.
	path func(string) string
}

// Flags returns the Names of a command whose flag for path is key(path).
func Flags(key func(path string) string) Names { return Names{Key: key, Flags: true} }

// Under returns the Names of a Config held in field prefix of the one n
// names: its path "Slot" is n's "Stream.Slot".
func (n Names) Under(prefix string) Names {
	return n.Renamed(func(path string) string { return prefix + "." + path })
}

// Renamed returns the Names of a Config whose field path is n's
// rename(path): a component that configures another from its own fields
// under other names. A path that rename maps to "" keeps its name.
func (n Names) Renamed(rename func(path string) string) Names {
	outer := n.path
	n.path = func(p string) string {
		if r := rename(p); r != "" {
			p = r
		}
		if outer != nil {
			p = outer(p)
		}
		return p
	}
	return n
}

// key is the user's name for path, or the path in the outermost Config.
func (n Names) key(path string) (string, bool) {
	if n.path != nil {
		path = n.path(path)
	}
	if n.Key != nil {
		if k := n.Key(path); k != "" {
			return k, true
		}
	}
	return path, false
}

// Of names the setting at path in a sentence: "--slot", "`slot`", or the
// Go field "Slot".
func (n Names) Of(path string) string {
	k, ok := n.key(path)
	switch {
	case !ok:
		return k
	case n.Flags:
		return "--" + k
	}
	return "`" + k + "`"
}

// Setting is a setting a fix gives a value: Path as in Of, Value as the
// user writes it ("true", "on", "published_at IS NULL").
type Setting struct{ Path, Value string }

// Set renders s as the user writes it: `--create-slot`,
// `--failover-slot=on`, `--backfill-where "x > 1"`; `backfill-where: x > 1`
// in a file; `BackfillWhere = "x > 1"` in Go.
func (n Names) Set(s Setting) string {
	k, ok := n.key(s.Path)
	switch {
	case !ok:
		if s.Value == "true" || s.Value == "false" || s.Value == "" {
			return k + " = " + orTrue(s.Value)
		}
		return k + " = " + quote(s.Value)
	case !n.Flags:
		return k + ": " + orTrue(s.Value)
	case s.Value == "" || s.Value == "true":
		return "--" + k
	case strings.ContainsAny(s.Value, " \"'<>*;&|()"):
		return "--" + k + " " + quote(s.Value)
	}
	return "--" + k + "=" + s.Value
}

// Run renders a fix: the command run again with settings: "`outboxd run
// --create-slot --backfill-where "x"`" with flags; with a file's keys,
// the settings to give the pipeline's entry before running it.
func (n Names) Run(command string, settings ...Setting) string {
	parts := n.sets(settings)
	if n.Flags {
		return "`" + n.Line(command, settings...) + "`"
	}
	if len(parts) == 0 {
		return "`outboxd " + command + "`"
	}
	return "`outboxd " + command + "` with " + strings.Join(quoteAll(parts), " and ")
}

// Line is Run on a line of its own, ready to copy: "outboxd run
// --create-slot --backfill-where "x"" with flags; with a file's keys,
// "outboxd run, with create-slot: true and backfill-where: x".
func (n Names) Line(command string, settings ...Setting) string {
	parts := n.sets(settings)
	if n.Flags || len(parts) == 0 {
		return strings.TrimSpace("outboxd " + command + " " + strings.Join(parts, " "))
	}
	return "outboxd " + command + ", with " + strings.Join(parts, " and ")
}

func (n Names) sets(settings []Setting) []string {
	parts := make([]string, len(settings))
	for i, s := range settings {
		parts[i] = n.Set(s)
	}
	return parts
}

func orTrue(v string) string {
	if v == "" {
		return "true"
	}
	return v
}

func quote(v string) string { return `"` + v + `"` }

func quoteAll(parts []string) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = "`" + p + "`"
	}
	return out
}
