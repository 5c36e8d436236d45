package config

import (
	"flag"
	"fmt"
	"strconv"
)

// source is where a pipeline's setting came from; a later one wins.
type source int

const (
	fromEnv      source = iota + 1 // OUTBOXD_<KEY>
	fromTop                        // the file's top level
	fromPipeline                   // the pipeline's own entry
)

// setting is the value of one key for one pipeline, and where it came from.
type setting struct {
	value string
	from  source
	line  int // in the file; 0 from the environment
	// refused: the value was refused (and reported), so the pipeline
	// has none to set or check.
	refused bool
}

// settings is one pipeline's settings by key.
type settings map[string]setting

// put sets key, which also overrides the other flag of its setting
// (database-url for database-url-file) when that came from a less
// specific source; from the same source both stay, and are refused.
func (s settings) put(key string, v setting) {
	if p := partner(key); p != "" {
		if o, ok := s[p]; ok && o.from < v.from {
			delete(s, p)
		}
	}
	s[key] = v
}

// keyLabel names a pipeline's problem with a flag by its key, saying where
// a value the pipeline did not set itself came from. Process settings are
// checked once, not for each pipeline, and a setting whose value its flag
// refused (already reported) is not checked.
func keyLabel(vals settings, refused map[string]bool) func(flag string) string {
	return func(name string) string {
		if isProcess(name) || refused[name] || refused[partner(name)] {
			return ""
		}
		switch s := vals[name]; s.from {
		case fromEnv:
			return name + " (" + EnvName(name) + ")"
		case fromTop:
			return name + " (top level, line " + strconv.Itoa(s.line) + ")"
		}
		return name
	}
}

// setProblem says why a flag refused a value: the value quoted unless
// its flag holds a secret, and the flag's default as an example of what
// it takes (the flag package says only "parse error").
func setProblem(fs *flag.FlagSet, name, value string, err error) string {
	f := fs.Lookup(name)
	if _, file := f.Value.(secretFile); file {
		return err.Error() // names the path
	}
	shown := strconv.Quote(value)
	for _, spec := range flags() {
		if spec.name == name && spec.show != nil {
			shown = "the value"
		}
	}
	return fmt.Sprintf("%s: %v (want a value like its default, %s)", shown, err, strconv.Quote(f.DefValue))
}
