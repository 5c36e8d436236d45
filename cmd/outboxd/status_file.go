package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/slot"
)

// pipelineStatus is one pipeline's entry in status --config --json.
type pipelineStatus struct {
	Pipeline string       `json:"pipeline"`
	Status   *slot.Status `json:"status,omitempty"`
	Error    string       `json:"error,omitempty"` // its status could not be read
}

// statusFile shows the status of every pipeline of the pipelines file at
// path, each under its name, going on past one whose status cannot be
// read; it exits exitError when any could not be read, or its slot is
// missing, invalidated or another database's.
func statusFile(ctx context.Context, path string, args []string, fs *flag.FlagSet, asJSON bool, stdout, stderr io.Writer, getenv func(string) string) int {
	fresh := func() *flag.FlagSet { c := config.Default(); f, _ := statusFlags(&c, io.Discard); return f }
	if err := flagsBesideConfig(fresh, args, "json"); err != nil {
		fmt.Fprintf(stderr, "outboxd status: %v\n", err)
		return exitUsage
	}
	f, err := loadPipelinesFile(path, fs, getenv)
	if err != nil {
		return invalidFile(stderr, "status", path, err)
	}
	code := exitOK
	var all []pipelineStatus
	for _, p := range f.Pipelines {
		st, err := readStatus(ctx, p.Config)
		if err != nil {
			fmt.Fprintf(stderr, "outboxd status: pipeline %s: %v\n", p.Name, err)
			all = append(all, pipelineStatus{Pipeline: p.Name, Error: err.Error()})
			code = exitError
			continue
		}
		all = append(all, pipelineStatus{Pipeline: p.Name, Status: &st})
		if !asJSON {
			if len(all) > 1 {
				fmt.Fprintln(stdout) // between pipelines
			}
			fmt.Fprintf(stdout, "pipeline %s (%s)\n", p.Name, config.DescribeDatabase(p.Config.Stream.DatabaseURL))
			printStatus(stdout, st)
		}
		if problem := slotProblem(p.Config, st); problem != "" {
			fmt.Fprintf(stderr, "outboxd status: pipeline %s: %s\n", p.Name, problem)
			code = exitError
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(all)
	}
	return code
}
