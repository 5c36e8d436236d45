package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/internal/config"
)

// loadPipelinesFile loads the pipelines file at path as run reads it: each
// pipeline's keys are run's flags (runFlags), and the table's shape that
// migrate reads (own-table, partitioned: run ignores them), so that one
// file serves every command. process is the command's parsed FlagSet
// holding its process settings (--metrics-addr, --log-level, ...), if
// any: see config.LoadFile.
func loadPipelinesFile(path string, process *flag.FlagSet, getenv func(string) string) (config.File, error) {
	return loadFile(path, process, getenv, false)
}

// loadFile is loadPipelinesFile, leaving the files the settings name
// unread with skipFiles (config.Config.SkipFiles).
func loadFile(path string, process *flag.FlagSet, getenv func(string) string, skipFiles bool) (config.File, error) {
	return config.LoadFile(path, process, func(c *config.Config) *flag.FlagSet {
		c.SkipFiles = skipFiles
		fs := runFlags(c, io.Discard)
		c.Register(fs, config.GroupShape)
		return fs
	}, getenv)
}

// configFlag defines --config on fs: a pipelines file, for what.
func configFlag(fs *flag.FlagSet, what string) {
	fs.String("config", "", "pipelines file (YAML, docs/pipelines-file.md): "+what)
}

// configPath is the --config that configFlag defined on fs ("" when not given).
func configPath(fs *flag.FlagSet) string {
	if f := fs.Lookup("config"); f != nil {
		return f.Value.String()
	}
	return ""
}

// flagsBesideConfig refuses the flags given on the command line beside
// --config other than allowed: a pipelines file's pipelines take their
// settings from the file, and a flag that looked as if it applied would
// be ignored. Environment variables are not refused: they are every
// pipeline's defaults. build makes the command's flags afresh, to tell
// the command line's from the environment's.
func flagsBesideConfig(build func() *flag.FlagSet, args []string, allowed ...string) error {
	fs := build()
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		return err
	}
	var given []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "config" && !slices.Contains(allowed, f.Name) {
			given = append(given, "--"+f.Name)
		}
	})
	if len(given) > 0 {
		return fmt.Errorf("%s beside --config: set it in the pipelines file (at its top level for every pipeline); beside --config only %s",
			strings.Join(given, ", "), flagList(allowed))
	}
	if fs.NArg() > 0 {
		return errors.New("unexpected argument " + fs.Arg(0))
	}
	return nil
}

func flagList(names []string) string {
	var out []string
	for _, n := range names {
		out = append(out, "--"+n)
	}
	if len(out) == 0 {
		return "nothing else"
	}
	return strings.Join(out, ", ")
}

// invalidFile reports the problems of a pipelines file; the command then
// exits exitUsage.
func invalidFile(w io.Writer, cmd, path string, err error) int {
	fmt.Fprintf(w, "outboxd %s: invalid pipelines file %s:\n%v\n", cmd, path, err)
	return exitUsage
}
