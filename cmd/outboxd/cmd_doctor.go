package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/registry"
	"github.com/outboxd/outboxd/slot"
)

const doctorSynopsis = "Checks the PostgreSQL servers of a pipeline (its flags, as run takes them) or of every\n" +
	"pipeline of a pipelines file before anything runs, and prints each finding with what to\n" +
	"do: wal_level, max_replication_slots and max_wal_senders against the slots and\n" +
	"walsenders in use plus those the pipelines need (a file's pipelines on one server\n" +
	"counted together), max_slot_wal_keep_size, wal_sender_timeout and TCP keepalives, on 18\n" +
	"idle_replication_slot_timeout, the role's REPLICATION and its privileges for run and\n" +
	"migrate, a standby's fitness to decode, the publication against the column mapping,\n" +
	"and the slot (missing, lost, invalidated, another database's, paused); and its Kafka\n" +
	"cluster with the client run would use (TLS, SASL): reachable, the topics known ahead\n" +
	"(a fixed topic, the dead-letter and progress topics) there, writable by this client\n" +
	"(the broker's ACLs), with their replication, and for exactly-once the transaction\n" +
	"timeout and state log; with a schema format, the registry and the subjects known\n" +
	"ahead. Exits 1 when a finding would stop a pipeline (fail);\n" +
	"warnings do not."

// doctorFlags builds doctor's flags on cfg: run's, and its own --format.
func doctorFlags(cfg *config.Config, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := newFlagSet("doctor", doctorSynopsis, stderr)
	configFlag(fs, "check every pipeline of the file, the pipelines on one server counted together; beside it only --format")
	cfg.Register(fs, config.GroupDatabase, config.GroupPrimary, config.GroupRunTable, config.GroupSlot, config.GroupPublication, config.GroupColumns,
		config.GroupPump, config.GroupKafka, config.GroupDelivery, config.GroupRegistry)
	return fs, fs.String("format", "text", "text (a table, one line a finding) or json")
}

func cmdDoctor(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg := config.Default()
	fs, format := doctorFlags(&cfg, stderr)
	if code, ok := parseFlags("doctor", fs, args, stderr, getenv); !ok {
		return code
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(stderr, "outboxd doctor: --format %q: want text or json\n", *format)
		return exitUsage
	}
	var pipelines []doctorPipeline
	if path := configPath(fs); path != "" {
		fresh := func() *flag.FlagSet { c := config.Default(); f, _ := doctorFlags(&c, io.Discard); return f }
		if err := flagsBesideConfig(fresh, args, "format"); err != nil {
			fmt.Fprintf(stderr, "outboxd doctor: %v\n", err)
			return exitUsage
		}
		f, err := loadPipelinesFile(path, fs, getenv)
		if err != nil {
			return invalidFile(stderr, "doctor", path, err)
		}
		for _, p := range f.Pipelines {
			pipelines = append(pipelines, doctorPipeline{name: p.Name, cfg: p.Config})
		}
	} else {
		cfg.ApplyLayout(fs)
		if code, ok := validate("doctor", &cfg, fs, stderr); !ok {
			return code
		}
		pipelines = []doctorPipeline{{name: cfg.Stream.WithDefaults().Slot, cfg: cfg}}
	}
	findings := diagnose(ctx, pipelines)
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Findings []finding `json:"findings"`
		}{findings})
	} else {
		printFindings(stdout, findings)
	}
	for _, f := range findings {
		if f.Severity == sevFail {
			return exitError
		}
	}
	return exitOK
}

// doctorPipeline is one pipeline doctor checks.
type doctorPipeline struct {
	name string
	cfg  config.Config
}

// diagnose checks every pipeline, and each server once for the pipelines
// on it.
func diagnose(ctx context.Context, pipelines []doctorPipeline) []finding {
	type server struct {
		facts serverFacts
		err   error
		needs []pipelineNeed
		names []string
	}
	servers := map[string]*server{}
	var order []string
	var out []finding
	for _, p := range pipelines {
		key := serverKey(p.cfg.Stream.DatabaseURL)
		s := servers[key]
		if s == nil {
			s = &server{}
			s.facts, s.err = readServerFacts(ctx, p.cfg.Stream.DatabaseURL)
			servers[key] = s
			order = append(order, key)
		}
		own, need := pipelineFindings(ctx, p)
		own = append(own, clusterFindings(ctx, p)...)
		for i := range own {
			own[i].Pipeline = p.name
		}
		out = append(out, own...)
		s.needs = append(s.needs, need)
		s.names = append(s.names, p.name)
	}
	var srv []finding
	for _, key := range order {
		s := servers[key]
		who := "server " + key + " (" + strings.Join(s.names, ", ") + ")"
		if s.err != nil {
			srv = append(srv, finding{Pipeline: who, Check: "connect", Severity: sevFail, Found: s.err.Error(), Fix: "check --database-url and that the server accepts this role"})
			continue
		}
		for _, f := range serverFindings(s.facts, s.needs) {
			f.Pipeline = who
			srv = append(srv, f)
		}
	}
	return append(srv, out...)
}

// kafkaInspectTimeout bounds reading a cluster: an unreachable broker is
// retried by the client until then.
const kafkaInspectTimeout = 15 * time.Second

// clusterFindings checks the pipeline's Kafka cluster.
func clusterFindings(ctx context.Context, p doctorPipeline) []finding {
	pc, err := p.cfg.Pipeline(slog.New(slog.DiscardHandler))
	if err != nil {
		return []finding{{Check: "kafka", Severity: sevFail, Found: err.Error()}}
	}
	need := kafkaNeed{ExactlyOnce: pc.Delivery == pipeline.ExactlyOnce, TxnTimeout: pc.Txn.WithDefaults().Timeout}
	if u := pc.Kafka.SASL.Username; pc.Kafka.SASL.Mechanism != "" && u != "" {
		need.Principal = "User:" + u
	}
	if t := pc.Pump.DeadLetterTopic; t != "" {
		need.Topics = append(need.Topics, neededTopic{Name: t, Why: "the dead-letter topic"})
	}
	if need.ExactlyOnce {
		need.Topics = append(need.Topics, neededTopic{Name: pc.Txn.WithDefaults().ProgressTopic, Why: "the progress topic", Created: true})
	}
	m := pc.Stream.Columns
	fixed := map[string]bool{}
	for _, tmpl := range append([]string{m.TopicTemplate}, tableTemplates(m)...) {
		if tmpl != "" && !strings.Contains(tmpl, "{") && !fixed[tmpl] {
			fixed[tmpl] = true
			need.Topics = append(need.Topics, neededTopic{Name: tmpl, Why: "a fixed --topic-template's topic"})
		}
	}
	ictx, cancel := context.WithTimeout(ctx, kafkaInspectTimeout)
	defer cancel()
	names := make([]string, len(need.Topics))
	for i, t := range need.Topics {
		names[i] = t.Name
	}
	facts, err := publish.Inspect(ictx, pc.Kafka, names, slog.New(slog.DiscardHandler))
	out := kafkaFindings(facts, err, need)
	if pc.Registry.Enabled() {
		var fixedTopics []string
		for t := range fixed {
			fixedTopics = append(fixedTopics, t)
		}
		slices.Sort(fixedTopics)
		// Topics not known ahead: a topic column, a template with a
		// placeholder, or tables without a mapping of their own.
		perTopicUnknown := m.TopicTemplate == "" || strings.Contains(m.TopicTemplate, "{")
		res, err := registry.Check(ictx, pc.Registry, fixedTopics, perTopicUnknown)
		out = append(out, registryFindings(res, err)...)
	}
	return out
}

// tableTemplates are the topic templates of the tables' own mappings.
func tableTemplates(m layout.Columns) []string {
	var out []string
	for _, t := range m.Tables {
		out = append(out, t.TopicTemplate)
	}
	return out
}

// serverKey names the server a database URL reaches (host:port), without
// the database, the role or a password.
func serverKey(url string) string {
	c, err := pgconn.ParseConfig(url)
	if err != nil {
		return "(unparsable URL)"
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
}

// readServerFacts reads what serverFindings judges.
func readServerFacts(ctx context.Context, url string) (serverFacts, error) {
	var f serverFacts
	conn, err := slot.Connect(ctx, url, "outboxd doctor")
	if err != nil {
		return f, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('wal_level'),
		current_setting('max_replication_slots')::int, current_setting('max_wal_senders')::int,
		(SELECT count(*) FROM pg_catalog.pg_replication_slots)::int,
		(SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'walsender')::int,
		(SELECT setting::int8 FROM pg_catalog.pg_settings WHERE name = 'max_slot_wal_keep_size'),
		(SELECT setting::int8 FROM pg_catalog.pg_settings WHERE name = 'wal_sender_timeout'),
		coalesce((SELECT setting::int8 * CASE unit WHEN 'min' THEN 60 WHEN 'h' THEN 3600 WHEN 'd' THEN 86400 ELSE 1 END
			FROM pg_catalog.pg_settings WHERE name = 'idle_replication_slot_timeout'), 0),
		current_user, (SELECT rolsuper OR rolreplication FROM pg_catalog.pg_roles WHERE rolname = current_user),
		(SELECT setting::int8 FROM pg_catalog.pg_settings WHERE name = 'tcp_keepalives_idle'),
		(SELECT setting::int8 FROM pg_catalog.pg_settings WHERE name = 'tcp_keepalives_interval'),
		(SELECT setting::int8 FROM pg_catalog.pg_settings WHERE name = 'tcp_keepalives_count')`).Scan(
		&f.Version, &f.WALLevel, &f.MaxSlots, &f.MaxWALSenders, &f.Slots, &f.WALSenders,
		&f.MaxSlotWALKeepMB, &f.WALSenderTimeoutMS, &f.IdleSlotTimeoutS, &f.Role, &f.Replication,
		&f.KeepalivesIdleS, &f.KeepalivesIntervalS, &f.KeepalivesCount)
	if err != nil {
		return f, fmt.Errorf("reading the server's settings: %w", err)
	}
	return f, nil
}

// pipelineFindings checks one pipeline's publication and slot, and says
// what it needs of its server.
func pipelineFindings(ctx context.Context, p doctorPipeline) ([]finding, pipelineNeed) {
	need := pipelineNeed{Name: p.name}
	conn, err := slot.Connect(ctx, p.cfg.Stream.DatabaseURL, "outboxd doctor")
	if err != nil {
		return []finding{{Check: "connect", Severity: sevFail, Found: err.Error(), Fix: "check --database-url"}}, need
	}
	defer conn.Close(context.WithoutCancel(ctx))
	stream := p.cfg.Stream.WithDefaults()
	var out []finding
	var names []string
	if tables, err := slot.CheckPublication(ctx, conn, stream.Publication, p.cfg.Mapping()); err != nil {
		out = append(out, finding{Check: "publication", Severity: sevFail, Found: err.Error()})
	} else {
		for _, t := range tables {
			names = append(names, t.String())
		}
		out = append(out, finding{Check: "publication", Severity: sevOK, Found: stream.Publication + " publishes " + strings.Join(names, ", ") + ", each fitting the column mapping"})
	}
	if pf, err := readPrivileges(ctx, conn, names); err != nil {
		out = append(out, finding{Check: "privileges", Severity: sevFail, Found: err.Error()})
	} else {
		out = append(out, privilegeFindings(pf)...)
	}
	st, err := slot.Read(ctx, conn, stream.Slot)
	if err != nil {
		return append(out, finding{Check: "slot", Severity: sevFail, Found: err.Error()}), need
	}
	need.SlotExists, need.Streaming = st.Exists, st.Active
	if st.InRecovery {
		out = append(out, standbyFinding(ctx, conn, p, st))
	}
	return append(out, slotFinding(ctx, conn, p, st)), need
}

// readPrivileges reads what the role may do for run and migrate; tables
// are the outbox tables (schema.name; the first one's schema is
// migrate's, public when there is none).
func readPrivileges(ctx context.Context, conn *pgx.Conn, tables []string) (privilegeFacts, error) {
	var f privilegeFacts
	f.Schema = "public"
	if len(tables) > 0 {
		f.Schema, _, _ = strings.Cut(tables[0], ".")
	}
	// has_table_privilege with several privileges says whether any is
	// held: each is asked on its own.
	err := conn.QueryRow(ctx, `WITH c AS (SELECT pg_catalog.to_regclass('outboxd_slots') AS slots)
		SELECT current_user, current_database(), c.slots IS NOT NULL,
			coalesce(pg_catalog.has_table_privilege(c.slots, 'SELECT'), false),
			coalesce(pg_catalog.has_table_privilege(c.slots, 'INSERT'), false),
			coalesce(pg_catalog.has_table_privilege(c.slots, 'UPDATE'), false),
			coalesce((SELECT array_agg(t ORDER BY t) FROM unnest($1::text[]) t
				WHERE NOT coalesce(pg_catalog.has_table_privilege(pg_catalog.to_regclass(t), 'SELECT'), true)), '{}'),
			pg_catalog.has_database_privilege(current_database(), 'CREATE'),
			pg_catalog.has_schema_privilege($2, 'CREATE')
		FROM c`, tables, f.Schema).Scan(&f.Role, &f.Database, &f.Catalog, &f.CatalogSelect, &f.CatalogInsert, &f.CatalogUpdate,
		&f.Unreadable, &f.CreateOnDatabase, &f.CreateOnSchema)
	if err != nil {
		return f, fmt.Errorf("reading the role's privileges: %w", err)
	}
	return f, nil
}

// standbyFinding judges a pipeline whose database URL reaches a standby:
// decoding there needs a primary URL, PostgreSQL 16+, and what keeps the
// slot safe (slot.CheckStandby), as run checks at start.
func standbyFinding(ctx context.Context, conn *pgx.Conn, p doctorPipeline, st slot.Status) finding {
	f := finding{Check: "standby"}
	n := p.cfg.SlotNames()
	if err := slot.StandbyRefusal(st, p.cfg.Stream.PrimaryURL, n); err != nil {
		f.Severity, f.Found = sevFail, err.Error()
		return f
	}
	primary, err := slot.Connect(ctx, p.cfg.Stream.PrimaryURL, "outboxd doctor")
	if err != nil {
		f.Severity, f.Found, f.Fix = sevFail, "reaching the primary: "+err.Error(), "check --primary-url"
		return f
	}
	defer primary.Close(context.WithoutCancel(ctx))
	facts, err := slot.ReadStandbyFacts(ctx, conn, primary)
	if err == nil {
		err = slot.CheckStandby(facts, n)
	}
	if err != nil {
		f.Severity, f.Found = sevFail, err.Error()
		return f
	}
	f.Severity, f.Found = sevOK, "decoding on this standby: PostgreSQL "+strconv.Itoa(facts.Version/10000)+", hot_standby_feedback on, wal_level logical on both servers, a physical slot on the primary"
	return f
}

// slotFinding judges the pipeline's slot.
func slotFinding(ctx context.Context, conn *pgx.Conn, p doctorPipeline, st slot.Status) finding {
	f := finding{Check: "slot " + st.Slot}
	n := p.cfg.SlotNames()
	switch {
	case !st.Exists:
		rec, found, err := slot.ReadRecord(ctx, conn, st.Slot)
		if err != nil || !found {
			f.Severity, f.Found, f.Fix = sevWarn, "does not exist yet", "outboxd migrate creates it (or run --create-slot)"
			return f
		}
		server, err := slot.Identify(ctx, p.cfg.Stream.DatabaseURL)
		if err != nil {
			f.Severity, f.Found = sevFail, "gone: outboxd's catalog records it, and "+err.Error()
			return f
		}
		f.Severity, f.Found = sevFail, slot.LostError(st.Slot, rec, true, server.SystemID, server.Timeline, n).Error()
	case st.OtherDatabase:
		f.Severity, f.Found = sevFail, slot.OtherDatabaseError(st, n).Error()
	case st.Lost():
		f.Severity, f.Found, f.Fix = sevFail, "invalidated ("+st.Why()+"): rows committed since may be in no slot", "recover as docs/recovery.md says (run --create-slot --backfill-where)"
	case st.WALStatus == "unreserved":
		f.Severity, f.Found, f.Fix = sevWarn, "wal_status unreserved: PostgreSQL is about to remove WAL the slot needs", "let the pipeline catch up, or raise max_slot_wal_keep_size"
	default:
		f.Severity, f.Found = sevOK, fmt.Sprintf("confirmed %s, %d bytes behind, retains %d bytes of WAL", st.Confirmed, st.LagBytes, st.RetainedWALBytes)
		if at, err := slot.ReadPausedAt(ctx, conn, st.Slot); err == nil && at != nil && !st.Active {
			f.Found += ", paused since " + at.UTC().Format("2006-01-02T15:04:05Z")
		}
	}
	return f
}

// printFindings writes findings as a table, one line a finding.
func printFindings(w io.Writer, findings []finding) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "SEVERITY\tOF\tCHECK\tFOUND\tTO DO")
	for _, f := range findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Severity, f.Pipeline, f.Check, oneLine(f.Found), oneLine(f.Fix))
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }
