// Command outboxd publishes a PostgreSQL transactional outbox to Kafka from
// the write-ahead log. See `outboxd help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/slot"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed (permanent error, unreachable database, ...)
	exitUsage = 2 // bad flags or configuration (run: PostgreSQL refuses the database URL's credentials at start)
)

const usage = `outboxd publishes committed outbox rows from PostgreSQL's WAL to Kafka, in
commit order, confirming the replication slot only after Kafka acknowledges.

Usage:
  outboxd migrate --database-url URL      create the outbox table, publication and slot
                                          (--print-sql: print the SQL for a DBA instead)
  outboxd run --database-url URL --brokers HOST:PORT
                                          stream the outbox to Kafka until SIGTERM/SIGINT
  outboxd status --database-url URL       the slot's state, lag and retained WAL; exit 1 when
                                          the slot is missing or invalidated
  outboxd doctor --database-url URL --brokers HOST:PORT
                                          check the PostgreSQL server, publication, slot and
                                          Kafka before a run, each finding with what to do
  outboxd validate --config FILE          check a pipelines file (several pipelines, one
                                          process) without connecting; migrate and status
                                          take --config FILE too, for every pipeline in it
  outboxd prune --database-url URL --older-than 7d
                                          remove outbox rows no longer needed (published, and
                                          older than any recovery would read): whole day
                                          partitions, or batched deletes; for cron
  outboxd replay --database-url URL --brokers HOST:PORT --replay-from 1000
                                          re-publish rows still in the outbox table (a range,
                                          a time span or a predicate); resumes where it stopped
  outboxd processed-keys --database-url URL
                                          maintain the processed_keys table of idempotent
                                          consumers (package idempotent): partitions, TTL
  outboxd demo                            a throwaway PostgreSQL and in-process Kafka, with
                                          sample orders flowing through
  outboxd version                         print the version, VCS revision and time, and Go version
  outboxd help config                     every command's flags, environment variables and
                                          defaults, in Markdown (docs/configuration.md)

Every flag can also be set with an environment variable: OUTBOXD_ and the flag
name in upper snake case (--database-url is OUTBOXD_DATABASE_URL); a flag on
the command line wins. Run "outboxd COMMAND --help" for a command's flags and
their defaults.

Exit codes: 0 clean stop, 1 failure (the reason is logged), 2 bad usage or
configuration (also: PostgreSQL refuses run's credentials at start).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP is not a reason to die (a closed terminal, a config reload
	// request), nor are SIGUSR1 and SIGUSR2 (run's pause and resume, sent
	// before run listens for them or to a command that has none): ignore
	// them rather than take the default action.
	signal.Ignore(syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)

	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, stderr, getenv)
	case "migrate":
		return cmdMigrate(ctx, rest, stdout, stderr, getenv)
	case "demo":
		return cmdDemo(ctx, rest, stdout, stderr, getenv)
	case "status":
		return cmdStatus(ctx, rest, stdout, stderr, getenv)
	case "doctor":
		return cmdDoctor(ctx, rest, stdout, stderr, getenv)
	case "validate":
		return cmdValidate(rest, stdout, stderr, getenv)
	case "processed-keys":
		return cmdProcessedKeys(ctx, rest, stdout, stderr, getenv)
	case "prune":
		return cmdPrune(ctx, rest, stdout, stderr, getenv)
	case "replay":
		return cmdReplay(ctx, rest, stdout, stderr, getenv)
	case "version", "--version", "-version":
		fmt.Fprint(stdout, describeBuild(version, readBuildInfo()))
		return exitOK
	case "help", "--help", "-help", "-h":
		if len(rest) == 1 && rest[0] == "config" {
			if err := config.Reference(stdout, regenerateReference, commands()); err != nil {
				fmt.Fprintln(stderr, "outboxd help config:", err)
				return exitError
			}
			return exitOK
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "outboxd: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// regenerateReference is the command that writes docs/configuration.md.
const regenerateReference = "make docs"

// commands is every command with its flags, each built by the function the
// command itself uses (so with the command's own defaults), in the order of
// the usage text: what the configuration reference documents.
func commands() []config.Command {
	cfg := func() *config.Config { c := config.Default(); return &c }
	migrate, _ := migrateFlags(cfg(), io.Discard)
	status, _ := statusFlags(cfg(), io.Discard)
	processedKeys, _ := processedKeysFlags(cfg(), io.Discard)
	demo, _ := demoFlags(cfg(), io.Discard)
	doctor, _ := doctorFlags(cfg(), io.Discard)
	return []config.Command{
		{Name: "migrate", Synopsis: migrateSynopsis, Flags: migrate},
		{Name: "run", Synopsis: runSynopsis, Flags: runFlags(cfg(), io.Discard)},
		{Name: "status", Synopsis: statusSynopsis, Flags: status},
		{Name: "doctor", Synopsis: doctorSynopsis, Flags: doctor},
		{Name: "validate", Synopsis: validateSynopsis, Flags: validateFlags(cfg(), io.Discard)},
		{Name: "prune", Synopsis: pruneSynopsis, Flags: pruneFlags(cfg(), io.Discard)},
		{Name: "replay", Synopsis: replaySynopsis, Flags: replayFlags(cfg(), io.Discard)},
		{Name: "processed-keys", Synopsis: processedKeysSynopsis, Flags: processedKeys},
		{Name: "demo", Synopsis: demoSynopsis, Flags: demo},
	}
}

// newFlagSet returns a FlagSet whose --help lists every flag with its
// default and environment variable.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: outboxd %s [flags]\n\n%s\n\nFlags (each also read from its environment variable):\n", name, synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := f.DefValue
			if def == "" {
				def = `""`
			}
			fmt.Fprintf(stderr, "  --%s  (env %s, default %s)\n      %s\n", f.Name, envName(f.Name), def, f.Usage)
		})
	}
	return fs
}

// parseFlags parses a command's flags (and their environment variables);
// when ok is false the command exits with code (--help is not a failure).
//
// A mistake gets its one line and a pointer to --help, not the whole help
// (the flag package prints the help on every parse error, burying the
// line above it); --help prints the help.
func parseFlags(name string, fs *flag.FlagSet, args []string, stderr io.Writer, getenv func(string) string) (code int, ok bool) {
	help, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := config.Parse(fs, args, getenv)
	fs.Usage = help
	fs.SetOutput(out)
	switch {
	case err == nil:
		return exitOK, true
	case errors.Is(err, flag.ErrHelp):
		help()
		return exitOK, false
	}
	fmt.Fprintf(stderr, "outboxd %s: %v\nRun \"outboxd %s --help\" for its flags.\n", name, err, name)
	return exitUsage, false
}

// validate reports every configuration problem of a command at once.
func validate(name string, cfg *config.Config, fs *flag.FlagSet, stderr io.Writer, extra ...error) (code int, ok bool) {
	if err := errors.Join(append([]error{cfg.Validate(fs)}, extra...)...); err != nil {
		fmt.Fprintf(stderr, "outboxd %s: invalid configuration:\n%v\n", name, err)
		return exitUsage, false
	}
	return exitOK, true
}

// printRecovery writes the error of a missing slot once more as plain text
// after the log line, which quotes and escapes it: its recovery command is
// meant to be copied into a shell.
func printRecovery(w io.Writer, err error) {
	if errors.Is(err, slot.ErrMissing) {
		fmt.Fprintf(w, "\n%v\n", err)
	}
}
