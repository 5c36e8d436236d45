package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"

	"github.com/outboxd/outboxd/lib/rawio"
)

// Pipeline is one pipeline of a pipelines file: its name, and its
// settings as if run's flags had been given. Flags is the FlagSet that
// built Config (for Dump): in File.Pipelines it is bound to that entry's
// Config.
type Pipeline struct {
	Name   string
	Config Config
	Flags  *flag.FlagSet
}

// File is a loaded and validated pipelines file.
type File struct {
	Pipelines []Pipeline
}

// LoadFile reads the pipelines file at path (docs/pipelines-file.md) and
// returns its pipelines, each built as run builds its one pipeline from
// flags: the defaults, newFlags(&cfg) (run's flags on cfg), then the
// environment (OUTBOXD_<KEY>, getenv), then the file's top-level keys,
// then the pipeline's own; a key and its -file variant are one setting.
//
// process is the command's already-parsed FlagSet of process settings
// (flagSpec.process, e.g. from RegisterProcess), bound to the caller's
// Config, or nil: a top-level process key sets it unless the command line
// or the environment already did, and each pipeline's Config gets its
// process settings from it. LoadFile checks them too, so the caller need
// not Validate process.
//
// Every problem is reported at once, each naming the pipeline and key
// (`pipeline "orders": slot: must not be empty`) or the file's line
// (`file.yaml:12: unknown key "slto" (did you mean slot?)`); then File
// is empty.
func LoadFile(path string, process *flag.FlagSet, newFlags func(*Config) *flag.FlagSet, getenv func(string) string) (File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return File{}, fmt.Errorf("reading pipelines file %s: %w", path, err)
	}
	scratch := Default()
	check := newFlags(&scratch) // where values are tried before any pipeline takes them
	check.SetOutput(io.Discard)
	known := map[string]bool{}
	check.VisitAll(func(f *flag.Flag) { known[f.Name] = true })
	r := &fileReader{path: path, known: known, getenv: getenv}
	top, sections, err := r.read(data)
	if err != nil {
		return File{}, err
	}
	if err := rawio.CheckEnv(); err != nil {
		r.errs = append(r.errs, err)
	}
	base, envBad := r.baseSettings(top, process, check)
	f := File{Pipelines: make([]Pipeline, len(sections))}
	envUsed := map[string]bool{}
	var perPipeline []error
	for i, sec := range sections {
		if sec.broken {
			continue
		}
		used, problems := r.build(&f.Pipelines[i], sec, base, process, newFlags)
		for _, name := range used {
			envUsed[name] = true
		}
		perPipeline = append(perPipeline, problems...)
	}
	errs := r.errs
	for _, name := range slices.Sorted(maps.Keys(envUsed)) {
		errs = append(errs, envBad[name])
	}
	errs = append(errs, perPipeline...)
	errs = append(errs, overlaps(f.Pipelines, sections)...)
	if len(errs) > 0 {
		return File{}, errors.Join(errs...)
	}
	return f, nil
}

// baseSettings is what every pipeline starts from: the top level's process
// settings (see processSettings), the environment's variables, then the
// top level's other keys. Each value is tried once on check, so a value
// its flag refuses is reported once, not for every pipeline: the top
// level's at once, the environment's (envBad) where a pipeline would use
// it.
func (r *fileReader) baseSettings(top section, process, check *flag.FlagSet) (base settings, envBad map[string]error) {
	base = r.processSettings(top, process)
	envBad = map[string]error{}
	for _, name := range slices.Sorted(maps.Keys(r.known)) {
		v := r.getenv(EnvName(name))
		if v == "" || isProcess(name) {
			continue
		}
		if err := check.Set(name, v); err != nil {
			base.put(name, setting{from: fromEnv, refused: true})
			envBad[name] = fmt.Errorf("%s: %s", EnvName(name), setProblem(check, name, v, err))
			continue
		}
		base.put(name, setting{value: v, from: fromEnv})
	}
	for _, e := range top.entries {
		if isProcess(e.key) {
			continue
		}
		if err := check.Set(e.key, e.value); err != nil {
			r.problem(e.line, "%s: %s", e.key, setProblem(check, e.key, e.value, err))
			base.put(e.key, setting{from: fromTop, line: e.line, refused: true})
			continue
		}
		base.put(e.key, setting{value: e.value, from: fromTop, line: e.line})
	}
	for _, key := range top.refused {
		base.put(key, setting{from: fromTop, refused: true})
	}
	return base, envBad
}

// build makes p the pipeline of sec: its flags set from base and then its
// own keys, the process settings copied from process, the layout's
// defaults applied, then validated. It returns the environment's refused
// variables the pipeline would have used, and its problems.
func (r *fileReader) build(p *Pipeline, sec section, base settings, process *flag.FlagSet, newFlags func(*Config) *flag.FlagSet) (envUsed []string, problems []error) {
	p.Name, p.Config = sec.name, Default()
	p.Config.fromFile = true
	p.Flags = newFlags(&p.Config)
	p.Flags.SetOutput(io.Discard)
	vals := maps.Clone(base)
	for _, e := range sec.entries {
		vals.put(e.key, setting{value: e.value, from: fromPipeline, line: e.line})
	}
	for _, key := range sec.refused {
		vals.put(key, setting{from: fromPipeline, refused: true})
	}
	refused := map[string]bool{} // what a refused value would have set is not checked either
	for _, name := range slices.Sorted(maps.Keys(vals)) {
		s := vals[name]
		if p.Flags.Lookup(name) == nil {
			continue // a process setting run's flags do not have
		}
		if s.refused {
			refused[name] = true
			if s.from == fromEnv {
				envUsed = append(envUsed, name)
			}
			continue
		}
		if err := p.Flags.Set(name, s.value); err != nil {
			problems = append(problems, fmt.Errorf("%s:%d: %s: %s: %s", r.path, s.line, sec.label, name, setProblem(p.Flags, name, s.value, err)))
			refused[name] = true
		}
	}
	if process != nil {
		process.VisitAll(func(pf *flag.Flag) {
			if isProcess(pf.Name) && p.Flags.Lookup(pf.Name) != nil {
				_ = p.Flags.Set(pf.Name, pf.Value.String()) // the same flag of the same table: it takes its own value
			}
		})
	}
	p.Config.ApplyLayout(p.Flags)
	for _, err := range p.Config.validate(p.Flags, keyLabel(vals, refused)) {
		problems = append(problems, fmt.Errorf("%s: %w", sec.label, err))
	}
	return envUsed, problems
}

// SettingFiles are the files the pipelines' settings were read from (a
// -file variant's: the database URL, passwords, schemas), each once, in
// the file's order: what a process watches to take up a secret rotated in
// place.
func (f File) SettingFiles() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range f.Pipelines {
		for _, spec := range flags() {
			if spec.fileOf == "" {
				continue
			}
			fl := p.Flags.Lookup(spec.name)
			if fl == nil || fl.Value.String() == "" || seen[fl.Value.String()] {
				continue
			}
			seen[fl.Value.String()] = true
			out = append(out, fl.Value.String())
		}
	}
	return out
}
