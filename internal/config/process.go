package config

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
)

// RegisterProcess defines on fs the flags of the process's own settings
// (flagSpec.process: --metrics-addr, --pprof, --max-procs, --log-level,
// --log-format), bound to c: what a command that reads a pipelines file
// takes beside it. Not with GroupOps or GroupLog on the same fs, which
// define them too.
func (c *Config) RegisterProcess(fs *flag.FlagSet) {
	for _, f := range flags() {
		if f.process {
			f.bind(fs, c, f.name, f.usage)
		}
	}
}

// isProcess reports whether name is a process setting's flag.
func isProcess(name string) bool {
	for _, f := range flags() {
		if f.process && f.name == name {
			return true
		}
	}
	return false
}

// checkOne is the problem a flag's own check finds with c ("" when none,
// or when the flag has no check).
func checkOne(c *Config, name string) string {
	for _, f := range flags() {
		if f.name == name && f.check != nil {
			if msg := f.check(c); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// processSettings applies the top level's process settings to process
// where neither its command line nor the environment set them, after
// checking each, and checks those they did set. It returns the valid ones,
// as settings every pipeline starts from.
func (r *fileReader) processSettings(top section, process *flag.FlagSet) settings {
	given := map[string]bool{}
	if process != nil {
		given = setFlags(process)
	}
	out := settings{}
	for _, e := range top.entries {
		if !isProcess(e.key) {
			continue
		}
		if msg := checkProcess(e.key, e.value); msg != "" {
			r.problem(e.line, "%s: %s", e.key, msg)
			continue
		}
		out.put(e.key, setting{value: e.value, from: fromTop, line: e.line})
		if process != nil && process.Lookup(e.key) != nil && !given[e.key] {
			if err := process.Set(e.key, e.value); err != nil {
				r.problem(e.line, "%s: %v", e.key, err)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if isProcess(name) {
			if msg := checkProcess(name, process.Lookup(name).Value.String()); msg != "" {
				r.errs = append(r.errs, fmt.Errorf("--%s (%s): %s", name, EnvName(name), msg))
			}
		}
	}
	return out
}

// checkProcess is the problem of a process setting's value ("" when none).
func checkProcess(name, value string) string {
	c := Default()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterProcess(fs)
	if err := fs.Set(name, value); err != nil {
		return setProblem(fs, name, value, err)
	}
	return checkOne(&c, name)
}
