package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/outboxd/outboxd/internal/config"
)

const validateSynopsis = "Checks a pipelines file (several pipelines, docs/pipelines-file.md) as migrate and\nstatus --config read it, with the environment's OUTBOXD_* variables and the process\nsettings given here, without connecting to anything.\nEvery problem is reported at once, naming the file's line or the pipeline and key\n(exit 2); a valid file prints each pipeline's name, database (no password), slot\nand delivery."

// validateFlags builds validate's flags on cfg: --config and the process
// settings, as run takes them beside a pipelines file.
func validateFlags(cfg *config.Config, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("validate", validateSynopsis, stderr)
	configFlag(fs, "the file to check (required)")
	fs.BoolVar(&cfg.SkipFiles, "skip-files", false, "do not read the files the file's settings name (the *-file keys' secrets and schemas, TLS files): "+
		"check a file rendered where they are not, as a chart's in CI; what depends on their content is not checked")
	cfg.RegisterProcess(fs)
	return fs
}

func cmdValidate(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs := validateFlags(&cfg, stderr)
	if code, ok := parseFlags("validate", fs, args, stderr, getenv); !ok {
		return code
	}
	path := configPath(fs)
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "outboxd validate: unexpected argument %s: give the file with --config\n", fs.Arg(0))
		return exitUsage
	case path == "":
		fmt.Fprintln(stderr, "outboxd validate: --config FILE is required")
		return exitUsage
	}
	f, err := loadFile(path, fs, getenv, cfg.SkipFiles)
	if err != nil {
		return invalidFile(stderr, "validate", path, err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pipeline\tdatabase\tslot\tdelivery")
	for _, p := range f.Pipelines {
		db := config.DescribeDatabase(p.Config.Stream.DatabaseURL)
		if p.Config.Stream.DatabaseURL == "" && p.Config.Files.DatabaseURLFile != "" {
			db = "(in " + p.Config.Files.DatabaseURLFile + ", not read)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, db, p.Config.Stream.Slot, p.Config.Delivery)
	}
	_ = tw.Flush()
	return exitOK
}
