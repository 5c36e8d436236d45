// Package config is outboxd's command-line configuration: one Config that
// holds each component's own Config (cdc, pump, publish, slot), defaults
// taken from those components (never retyped here), and one table of flags
// (flags.go) in which each flag is named once, bound to its field, explained,
// and checked. Every flag also reads an OUTBOXD_<FLAG_IN_UPPER_SNAKE>
// environment variable; Validate reports every problem at once. A
// pipelines file (LoadFile, file.go) describes several pipelines with the
// same flags as keys, each validated as if its flags had been given.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/internal/retention"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/lib/rawio"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/pump"
	"github.com/outboxd/outboxd/registry"
	"github.com/outboxd/outboxd/slot"
)

// Config holds every option of every command, in the parts they set;
// each command registers the groups of flags it uses.
type Config struct {
	// Config is one pipeline's settings: each stage's Config as its flags
	// set it. Its column mapping (Stream.Columns) holds the columns'
	// roles; Shape chooses the records' shape (Mapping), and the command
	// supplies the Names (Pipeline).
	pipeline.Config

	Shape   Shape            // the layout flags: what shape records take
	Process Process          // the process's own settings, one per process whatever its pipelines
	Outbox  OutboxTable      // migrate's and prune's outbox table
	Prune   retention.Config // prune: what to remove (its table and slot come from Outbox and Stream)
	// Replay is what replay selects and where it sends it; the rest of
	// its cdc.ReplayConfig comes from the pipeline's settings (Replayer).
	Replay cdc.ReplayConfig
	Files  Files // the files settings are read from

	// TableColumns are --table-columns' items, TABLE:SETTING=VALUE:
	// tables' own column mappings (Mapping parses them).
	TableColumns []string

	// SkipFiles leaves the files settings name unread (outboxd validate
	// --skip-files, for a file rendered where its secrets are not): a
	// -file variant keeps its path, and what would be checked of the
	// content is not; TLS files are not looked for. Set it before parsing.
	SkipFiles bool
	unread    map[string]bool // flags whose -file variant was not read
	fromFile  bool            // a pipeline of a pipelines file: its settings are keys (SettingNames)
}

// Shape is what the layout flags set: the shape of the records, applied
// to the column roles by Mapping.
type Shape struct {
	// CloudEvents turns on CE: records as CloudEvents.
	CloudEvents bool
	CE          layout.CloudEvents
	// Layout is LayoutDefault or LayoutDebezium: DZ (with DZPlacement,
	// table.fields.additional.placement as text) then shapes the records.
	Layout      string
	DZ          layout.Debezium
	DZPlacement string
}

// Process is the process's own settings (the flags marked process): a
// pipelines file takes them at its top level only.
type Process struct {
	LogLevel  string
	LogFormat string

	// Fleet is this replica's part in running a pipelines file (run
	// --config); Replica -1: from the host name (see --replica).
	Fleet fleet.Config

	MetricsAddr string
	Pprof       bool
	MaxProcs    int // GOMAXPROCS for run; 0: Go's default

	// The process's in-flight budget (run): 0 takes it from the memory
	// limit (InFlightBudget).
	InFlightBudgetBytes, InFlightBudgetRecords int
}

// OutboxTable is the outbox table migrate creates and prune prunes.
type OutboxTable struct {
	Table       string // SQL syntax
	OwnTable    bool   // migrate: the table is the application's own; create only the publication and outboxd's tables
	Partitioned bool   // migrate: create the default table partitioned by day
	// ExtendPublication (migrate): an existing publication that does not
	// publish Table gets it added, so that one publication and one slot
	// stream several outbox tables.
	ExtendPublication bool
}

// Files are the files the -file flags name (already read into the
// settings they stand for: Stream.DatabaseURL, Kafka.SASL.Password, the
// registry's password and schemas), and the schema registry's TLS files,
// read again for each connection.
type Files struct {
	DatabaseURLFile       string
	PrimaryURLFile        string
	KafkaSASLPasswordFile string
	RegistryPasswordFile  string
	ValueSchemaFile       string
	KeySchemaFile         string

	RegistryTLSCAFile   string
	RegistryTLSCertFile string
	RegistryTLSKeyFile  string
}

// DefaultMaxProcs is run's GOMAXPROCS. One slot is sent by one walsender
// process, and outboxd spends less CPU per event than that walsender during
// a drain, so one core keeps up with it; a second one made the Go runtime
// hand goroutines between threads, which cost CPU per event at steady
// rates and did not make the drain faster (docs/bench/history.md).
const DefaultMaxProcs = 1

// The delivery modes of --delivery.
const (
	DeliveryAtLeastOnce = pipeline.AtLeastOnce
	DeliveryExactlyOnce = pipeline.ExactlyOnce
)

// The layouts of --layout.
const (
	LayoutDefault  = "default"
	LayoutDebezium = "debezium"
)

// Mapping is the column mapping the options ask for: Stream.Columns in
// the shape --layout and --cloudevents name, with its options (CE, or DZ
// with --layout debezium). --layout debezium with --cloudevents is refused
// by --layout's check.
func (c *Config) Mapping() layout.Columns {
	m := c.Stream.Columns
	m.Tables, _ = parseTableColumns(c.TableColumns) // its flag's check reports its problems
	switch {
	case c.Shape.Layout == LayoutDebezium:
		m.Shape, m.Debezium = layout.ShapeDebezium, c.Shape.DZ
		m.Debezium.AdditionalPlacement, _ = layout.ParsePlacements(c.Shape.DZPlacement) // validated
	case c.Shape.CloudEvents:
		m.Shape, m.CloudEvents = layout.ShapeCloudEvents, c.Shape.CE
	default:
		m.Shape = layout.ShapePlain
	}
	// Whatever the delivery mode: another outboxd on the cluster may keep
	// its exactly-once progress in the default topic.
	m.ReservedTopics = []string{c.Txn.ProgressTopic}
	if c.Txn.ProgressTopic != publish.DefaultProgressTopic {
		m.ReservedTopics = append(m.ReservedTopics, publish.DefaultProgressTopic)
	}
	if t := c.Pump.DeadLetterTopic; t != "" {
		m.ReservedTopics = append(m.ReservedTopics, t)
	}
	return m
}

// ApplyLayout gives the column flags not set on the command line (or in
// the environment) the defaults of the layout: with --layout debezium the
// key column is Debezium's aggregateid. Call it after parsing.
func (c *Config) ApplyLayout(fs *flag.FlagSet) {
	if c.Shape.Layout != LayoutDebezium {
		return
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	d := layout.DebeziumColumns()
	if !set["key-column"] {
		c.Stream.Columns.Key = d.Key
	}
	if !set["id-column"] {
		c.Stream.Columns.ID = d.ID
	}
	if !set["payload-column"] {
		c.Stream.Columns.Payload = d.Payload
	}
}

// Default returns the defaults of every option: the components' own, and
// the command's read linger (cdc.DefaultReadLinger; the library's zero
// value is off). With raw I/O off (rawio.EnvVar) the read linger defaults
// to off: it is a raised socket low-water mark, which needs raw I/O.
func Default() Config {
	linger := cdc.DefaultReadLinger
	if !rawio.Enabled() {
		linger = 0
	}
	return Config{
		Config: pipeline.Config{
			Stream:   cdc.Config{ReadLinger: linger}.WithDefaults(),
			Pump:     pump.Config{}.WithDefaults(),
			Kafka:    publish.Config{}.WithDefaults(),
			Delivery: DeliveryAtLeastOnce,
			Txn:      publish.TxnConfig{}.WithDefaults(),
			Registry: registry.Config{}.WithDefaults(),
			Monitor:  slot.MonitorConfig{}.WithDefaults(),
		},
		Shape: Shape{
			CE:     layout.CloudEvents{ContentType: layout.DefaultCloudEventsContentType},
			Layout: LayoutDefault,
			DZ: layout.Debezium{RouteByField: layout.DefaultRouteByField, RouteTopicReplacement: layout.DefaultRouteTopicReplacement,
				KeyConverter: layout.ConverterString, ValueConverter: layout.ConverterString},
		},
		Outbox: OutboxTable{Table: "public.outbox"},
		Prune:  retention.Config{RecoveryMargin: slot.RecoveryMargin}.WithDefaults(),
		Process: Process{
			LogLevel:  "info",
			LogFormat: "text",
			MaxProcs:  DefaultMaxProcs,
			Fleet:     withReplicaUnset(fleet.Config{}.WithDefaults()),
		},
	}
}

func withReplicaUnset(c fleet.Config) fleet.Config { c.Replica = -1; return c }

// ProcessFlags names the flags of the process's own settings
// (flagSpec.process): what a command reading a pipelines file takes
// beside --config.
func ProcessFlags() []string { return flagNames(func(f flagSpec) bool { return f.process }) }

// GroupFlags names the flags of group g.
func GroupFlags(g Group) []string { return flagNames(func(f flagSpec) bool { return f.group == g }) }

// flagNames names the flags of the table that keep says to, in its order.
func flagNames(keep func(flagSpec) bool) []string {
	var names []string
	for _, f := range flags() {
		if keep(f) {
			names = append(names, f.name)
		}
	}
	return names
}

// Group is a set of flags a command registers together.
type Group int

// The groups of flags.
const (
	GroupDatabase      Group = iota // --database-url
	GroupTable                      // --table: the table migrate and prune act on
	GroupRunTable                   // --table: the table run checks the publication publishes
	GroupShape                      // --own-table, --partitioned (migrate)
	GroupPrune                      // --older-than and the other options of prune
	GroupPublication                // --publication
	GroupSlot                       // --slot
	GroupCreateSlot                 // --create-slot
	GroupBackfill                   // --backfill-where (run)
	GroupColumns                    // which columns of the outbox table make the record
	GroupStream                     // the replication stream's timings
	GroupPump                       // in-flight window, dead-letter topic
	GroupKafka                      // brokers, record size, TLS, SASL
	GroupDelivery                   // --delivery and the exactly-once options
	GroupOps                        // metrics, WAL checks, heartbeat
	GroupLog                        // --log-level, --log-format
	GroupFleet                      // --replica, --replicas, --rank-delay (run --config)
	GroupRegistry                   // --value-format, --key-format and the schema registry
	GroupPrimary                    // --primary-url: decoding on a standby
	GroupBackfillOrder              // --backfill-order-column (run, replay)
	GroupReplay                     // what replay selects, and where it sends it
)

// Register defines the flags of the groups on fs, bound to c's fields,
// with c's current values as defaults.
func (c *Config) Register(fs *flag.FlagSet, groups ...Group) {
	for _, g := range groups {
		for _, f := range flags() {
			if f.group == g {
				f.bind(fs, c, f.name, f.usage)
			}
		}
	}
}

// EnvName is the environment variable of a flag: OUTBOXD_ and the flag in
// upper snake case.
func EnvName(flagName string) string {
	return "OUTBOXD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs; a flag not given on the command line takes its
// environment variable when set, unless the command line gave the other
// flag of its setting (--database-url-file on the command line wins over
// OUTBOXD_DATABASE_URL, as --database-url would).
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := setFlags(fs)
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || set[partner(f.Name)] {
			return
		}
		if v := getenv(EnvName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", EnvName(f.Name), err))
			}
		}
	})
	return errors.Join(errs...)
}

// setFlags is the flags of fs that were set (on the command line, from
// the environment or a file).
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// Validate reports every problem with the flags the command registered,
// naming each flag and its variable: the flags' own checks, then the
// pipeline's Validate (each component's and the rules across them), whose
// problems with a field are reported under the flag that sets it
// (flagSpec.field) when the command registered that flag, and not at all
// when it did not (the field is not this command's). A problem with a
// field that no flag sets is reported as it is, and so is a value of
// rawio.EnvVar that is neither on nor off.
func (c *Config) Validate(fs *flag.FlagSet) error {
	return errors.Join(append([]error{rawio.CheckEnv()}, c.validate(fs, func(name string) string {
		return "--" + name + " (" + EnvName(name) + ")"
	})...)...)
}

// validate is Validate without the process's raw I/O switch, each problem
// with a flag reported under label(flag) (a pipelines file names its keys
// instead of flags); a flag labelled "" is not this caller's to report,
// and its problems are left out. A setting read from its -file variant is
// reported under the -file flag, which is what was given.
func (c *Config) validate(fs *flag.FlagSet, label func(flag string) string) []error {
	set := setFlags(fs)
	files := fileFlags()
	name := func(flag string) string {
		if c.unread[flag] {
			return "" // its value is in a file not read (SkipFiles)
		}
		if file := files[flag]; set[file] && !set[flag] {
			return label(file)
		}
		return label(flag)
	}
	var errs []error
	for base, file := range sortedPairs(files) {
		if set[base] && set[file] && label(base) != "" {
			errs = append(errs, fmt.Errorf("%s and %s: give one of them, not both", label(base), label(file)))
		}
	}
	flagged := map[string]bool{}
	byField := fieldFlags()
	for _, f := range flags() {
		if f.check == nil || fs.Lookup(f.name) == nil {
			continue
		}
		if msg := f.check(c); msg != "" {
			if n := name(f.name); n != "" {
				errs = append(errs, fmt.Errorf("%s: %s", n, msg))
			}
			flagged[f.name] = true
		}
	}
	for _, p := range c.componentProblems() {
		flag, ok := byField[p.field]
		switch {
		case !ok && p.field == "":
			errs = append(errs, errors.New(p.problem))
		case !ok:
			errs = append(errs, fmt.Errorf("%s: %s", p.field, p.problem)) // a rule without a flag: still reported
		case fs.Lookup(flag) == nil || flagged[flag]:
		default:
			if n := name(flag); n != "" {
				errs = append(errs, fmt.Errorf("%s: %s", n, p.problem))
			}
			flagged[flag] = true
		}
	}
	return errs
}

// sortedPairs yields the flags with a -file variant, and the variant, in
// the order of their names.
func sortedPairs(files map[string]string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, base := range slices.Sorted(maps.Keys(files)) {
			if !yield(base, files[base]) {
				return
			}
		}
	}
}

// problem is one problem a component's Validate found with a field,
// named "<Config field>.<component field>" ("Stream.ReadLinger").
type problem struct{ field, problem string }

// componentProblems runs the pipeline's Validate: every stage's own and
// the rules that span stages. The column mapping's own problems
// (Stream.Columns) are the column flags', which check it one flag at a
// time; the rules across stages see it whole (the Debezium layout with a
// schema format).
func (c *Config) componentProblems() []problem {
	var out []problem
	for _, e := range c.Problems() {
		var fe *field.Error
		switch {
		case errors.As(e, &fe) && fe.Field == "Stream.Columns":
		case fe != nil:
			out = append(out, problem{fe.Field, fe.Problem})
		default:
			out = append(out, problem{"", e.Error()})
		}
	}
	return out
}

// Problems is the problems of the pipeline the options describe (its
// embedded Config's, with the records' shape and the names its settings
// were given by).
func (c *Config) Problems() []error { return c.pipeline().Problems() }

// pipeline is the pipeline the options describe, without the schema
// registry's TLS files read (see Pipeline).
func (c *Config) pipeline() pipeline.Config {
	pc := c.Config
	pc.Stream.Columns = c.Mapping()
	pc.Names = c.SettingNames()
	return pc
}

// Pipeline is the pipeline run's options describe (log takes what reading
// the schema registry's TLS files at each connection has to say): each
// stage's Config as the flags set it (Kafka's TLS and SASL in
// Kafka), the column mapping (Mapping), and the Names its messages
// give the settings by.
func (c *Config) Pipeline(log *slog.Logger) (pipeline.Config, error) {
	pc := c.pipeline()
	var err error
	if pc.Registry.TLS, err = c.registryTLS(log); err != nil {
		return pipeline.Config{}, err
	}
	return pc, nil
}

// Logger builds the logger the options ask for, writing to w.
func (c *Config) Logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Process.LogLevel)) // validated
	opts := &slog.HandlerOptions{Level: level}
	if c.Process.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
