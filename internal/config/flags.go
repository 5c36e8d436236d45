package config

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/cdc"
	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/rawio"
	"github.com/outboxd/outboxd/lib/sqlquote"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/slot"
)

// flagSpec is one flag: its name, group, help, binding to a field, check,
// and how the startup dump shows it. Each flag is named here only.
type flagSpec struct {
	name, usage string
	group       Group
	bind        func(fs *flag.FlagSet, c *Config, name, usage string)
	check       func(c *Config) string // "" when fine; the flag's own syntax, and rules no component owns
	// field is the component Config field the flag sets, "Stream.ReadLinger":
	// the component's Validate owns the field's rules, and its problems are
	// reported under the flag's name.
	field string
	show  func(v string) string // the startup dump's rendering; nil: as is
	// fileOf names the flag this one is the -file variant of: it sets that
	// flag's setting from a file's content, and the two are one setting
	// (giving both is refused; the more specific source wins).
	fileOf string
	// process marks a setting of the whole process (metrics address,
	// GOMAXPROCS, logging), not of one pipeline: a pipelines file takes it
	// at its top level only.
	process bool
}

// databaseURLCheck is the check of a database URL setting: parsed as what
// connects parses it, so that what is checked is what is used; empty is
// left to whoever requires it.
func databaseURLCheck(url func(c *Config) string) func(c *Config) string {
	return func(c *Config) string {
		if url(c) == "" {
			return ""
		}
		_, msg := parseDatabase(url(c))
		return msg
	}
}

// flags is the table of every flag.
func flags() []flagSpec {
	return []flagSpec{
		{name: "database-url", group: GroupDatabase,
			usage: "PostgreSQL URL or keyword/value string, e.g. postgres://user:pass@host:5432/app (required, here or with --database-url-file); the replication connection adds replication=database",
			field: "Stream.DatabaseURL",
			bind:  str(func(c *Config) *string { return &c.Stream.DatabaseURL }),
			// cdc requires one.
			check: databaseURLCheck(func(c *Config) string { return c.Stream.DatabaseURL }),
			show:  DescribeDatabase},
		{name: "database-url-file", group: GroupDatabase, fileOf: "database-url",
			usage: "file holding the --database-url, e.g. a mounted secret (its trailing newline and spaces left out): keeps the password out of ps and the environment; not with --database-url",
			bind:  secretFileFlag(func(c *Config) *string { return &c.Files.DatabaseURLFile }, func(c *Config) *string { return &c.Stream.DatabaseURL })},
		{name: "primary-url", group: GroupPrimary,
			usage: "the primary's URL, when --database-url reaches a physical standby that decodes (PostgreSQL 16+, hot_standby_feedback on, a physical slot to the primary): " +
				"the slot is created and streamed on the standby; outboxd's catalog, heartbeats and migrate's objects are written on the primary. Empty: --database-url must reach the primary",
			field: "Stream.PrimaryURL",
			bind:  str(func(c *Config) *string { return &c.Stream.PrimaryURL }),
			check: databaseURLCheck(func(c *Config) string { return c.Stream.PrimaryURL }),
			show:  DescribeDatabase},
		{name: "primary-url-file", group: GroupPrimary, fileOf: "primary-url",
			usage: "file holding the --primary-url, e.g. a mounted secret (its trailing newline and spaces left out); not with --primary-url",
			bind:  secretFileFlag(func(c *Config) *string { return &c.Files.PrimaryURLFile }, func(c *Config) *string { return &c.Stream.PrimaryURL })},
		{name: "table", group: GroupTable,
			usage: `outbox table in SQL syntax, optionally schema-qualified: app.outbox, or "App"."Outbox" for capitals or other characters`,
			bind:  str(func(c *Config) *string { return &c.Outbox.Table }),
			check: func(c *Config) string {
				if _, err := sqlquote.ParseQualified(c.Outbox.Table); err != nil {
					return err.Error()
				}
				return ""
			}},
		{name: "table", group: GroupRunTable,
			usage: "outbox table the publication must publish, in SQL syntax as migrate's --table (app.outbox, or \"App\".\"Outbox\"): " +
				"run refuses to start while the publication does not publish it. Empty: not checked, the publication's tables are streamed as they are",
			field: "Stream.Table",
			bind:  str(func(c *Config) *string { return &c.Stream.Table })},
		{name: "own-table", group: GroupShape,
			usage: "--table is the application's own outbox, of another shape: create only the publication over it and outboxd's own tables, not the default table or its constraints, " +
				"and check that the column flags (--id-column, --topic-template, ...; give run the same) fit it",
			bind: boolean(func(c *Config) *bool { return &c.Outbox.OwnTable })},
		{name: "extend-publication", group: GroupShape,
			usage: "when the publication exists and does not publish --table, add the table to it (while the table is empty: rows already in it would never be published) " +
				"instead of refusing: one publication and one slot over several outbox tables, e.g. a schema's each for several services in one database (docs/fleet.md). " +
				"Every table of the publication must fit the column flags, or its own mapping (--table-columns)",
			bind: boolean(func(c *Config) *bool { return &c.Outbox.ExtendPublication })},
		{name: "partitioned", group: GroupShape,
			usage: "create the default table partitioned by day on created_at (a DEFAULT partition takes a row whose day has no partition yet, so an insert never fails) and the publication with publish_via_partition_root; " +
				"outboxd prune then drops whole days instead of deleting rows. For a new table only (an existing one is refused, not converted); not with --own-table",
			bind: boolean(func(c *Config) *bool { return &c.Outbox.Partitioned }),
			check: func(c *Config) string {
				if c.Outbox.Partitioned && (c.Outbox.OwnTable || c.Shape.Layout == LayoutDebezium) {
					return "not with --own-table or --layout debezium: it shapes the default table"
				}
				return ""
			}},
		{name: "older-than", group: GroupPrune,
			usage: "remove rows whose --created-column is older than this (a Go duration, or days: 7d; required). Never rows Kafka has not acknowledged, nor those a lost slot's recovery would backfill: the cutoff is also at most the commit time up to which Kafka acknowledged everything for --slot, less --recovery-margin",
			bind: func(fs *flag.FlagSet, c *Config, name, usage string) {
				fs.Var((*days)(&c.Prune.OlderThan), name, usage)
			},
			check: func(c *Config) string {
				if c.Prune.OlderThan <= 0 {
					return "required: a positive duration, e.g. 7d"
				}
				return ""
			}},
		{name: "created-column", group: GroupPrune,
			usage: "the timestamptz column set at insert to at most the commit time, e.g. DEFAULT now() (the default table's created_at); for a partitioned table its partition key",
			bind:  str(func(c *Config) *string { return &c.Prune.Column }),
			check: func(c *Config) string { return nonEmpty(c.Prune.Column) }},
		{name: "recovery-margin", group: GroupPrune,
			usage: "rows this long before the newest acknowledged commit are kept too: a row's created_at is its transaction's start, and a lost slot's recovery backfills from the newest acknowledged commit less this margin (the recovery command assumes the default)",
			bind:  duration(func(c *Config) *time.Duration { return &c.Prune.RecoveryMargin }),
			check: func(c *Config) string {
				if c.Prune.RecoveryMargin < 0 {
					return "must not be negative"
				}
				return ""
			}},
		{name: "ahead-days", group: GroupPrune, usage: "partitioned table: create the partitions of today and this many days after it (a day without one goes to the DEFAULT partition)",
			bind: integer(func(c *Config) *int { return &c.Prune.AheadDays }), check: positiveInt(func(c *Config) int { return c.Prune.AheadDays })},
		{name: "batch-size", group: GroupPrune, usage: "rows one DELETE removes at most (plain table, DEFAULT partition); each batch is its own transaction",
			bind: integer(func(c *Config) *int { return &c.Prune.BatchSize }), check: positiveInt(func(c *Config) int { return c.Prune.BatchSize })},
		{name: "lock-timeout", group: GroupPrune, usage: "longest wait for the lock that creating or dropping a partition takes (inserts queue behind it meanwhile); retried with backoff for up to a minute",
			bind: duration(func(c *Config) *time.Duration { return &c.Prune.LockTimeout }), check: positive(func(c *Config) time.Duration { return c.Prune.LockTimeout })},
		{name: "dry-run", group: GroupPrune, usage: "say what would be removed, and remove nothing",
			bind: boolean(func(c *Config) *bool { return &c.Prune.DryRun })},
		{name: "publication", group: GroupPublication, usage: "publication over the outbox table",
			field: "Stream.Publication",
			bind:  str(func(c *Config) *string { return &c.Stream.Publication }),
			check: func(c *Config) string { return nonEmpty(c.Stream.Publication) }},
		{name: "slot", group: GroupSlot, usage: "logical replication slot (pgoutput); an unused slot retains WAL until outboxd confirms it",
			field: "Stream.Slot",
			bind:  str(func(c *Config) *string { return &c.Stream.Slot }),
			check: func(c *Config) string { return nonEmpty(c.Stream.Slot) },
		},
		{name: "create-slot", group: GroupCreateSlot,
			usage: "create the replication slot when it is missing. migrate (default true) creates it only on a fresh install: never where outboxd_slots records a slot that is gone, nor over an outbox table that already holds rows. " +
				"run (default false) otherwise stops on a missing slot, saying whether it was lost and how to recover; with this flag it creates it, and rows committed before then are published only with --backfill-where",
			field: "Stream.CreateSlot",
			bind:  boolean(func(c *Config) *bool { return &c.Stream.CreateSlot })},
		{name: "failover-slot", group: GroupCreateSlot,
			usage: "failover slot (PostgreSQL 17+): a slot created with FAILOVER true is kept on standbys that run with sync_replication_slots = on, so a failover to one needs no recovery (docs/recovery.md, Failover slots). " +
				"auto: create new slots as failover slots where the server supports it, and log how to turn it on for an existing slot; " +
				"on: also turn it on for an existing slot (while no process streams from it), an error before 17; off: neither",
			field: "Stream.FailoverSlot",
			bind:  str(func(c *Config) *string { return (*string)(&c.Stream.FailoverSlot) }),
			check: func(c *Config) string { return nonEmpty(string(c.Stream.FailoverSlot)) },
		},
		{name: "backfill-where", group: GroupBackfill,
			usage: "with --create-slot, when run creates the slot: an SQL predicate over the outbox table (e.g. \"published_at IS NULL\" after a polling relay, or \"id > 123456\" after a lost slot). " +
				"The slot is created with an exported snapshot, the rows matching the predicate in that snapshot are published first (each key's rows in the order they were written: see --backfill-order-column; read in a read-only transaction), " +
				"and streaming starts once Kafka acknowledged them all: no gap and no overlap. Ignored when the slot exists; a backfill interrupted by a crash runs again whole on the next start (duplicates, no loss)",
			field: "Stream.BackfillWhere",
			bind:  str(func(c *Config) *string { return &c.Stream.BackfillWhere }),
		},
		{name: "backfill-order-column", group: GroupBackfillOrder,
			usage: "the column a backfill reads each table's rows in order of, ties broken by --id-column (ORDER BY col NULLS LAST, id), so each key's rows reach Kafka in the order they were written: " +
				"a timestamptz, timestamp or integer column set in that order (e.g. DEFAULT clock_timestamp(), or a bigserial); every table of the publication must have it. " +
				"Default empty: the id when it is an integer filled from a sequence (identity, serial: the default table), else --timestamp-column; " +
				"a backfill of a table with neither (a uuid, text or varchar id, or an integer id the application assigns, and no --timestamp-column) is refused before anything is published. Give it to every start until the backfill is done",
			bind:  str(func(c *Config) *string { return &c.Stream.BackfillOrderColumn }),
			field: "Stream.BackfillOrderColumn"},

		{name: "replay-name", group: GroupReplay,
			usage: "names the replay: its progress in outboxd_replays (the same name resumes where it stopped), the value of the outboxd.replay header on each record, and with exactly-once delivery its transactional id's suffix. " +
				"Default: the table and a digest of the selection, so the same command resumes",
			field: "Replay.Name",
			bind:  str(func(c *Config) *string { return &c.Replay.Name })},
		{name: "replay-from", group: GroupReplay,
			usage: "replay the rows from this value of the ordering column on (inclusive; the id of the default table, else --backfill-order-column or --timestamp-column), e.g. 1000 or \"2026-12-01 10:00+00\"",
			field: "Replay.Selection.From",
			bind:  str(func(c *Config) *string { return &c.Replay.Selection.From })},
		{name: "replay-to", group: GroupReplay,
			usage: "replay the rows up to this value of the ordering column (inclusive)",
			field: "Replay.Selection.To",
			bind:  str(func(c *Config) *string { return &c.Replay.Selection.To })},
		{name: "replay-since", group: GroupReplay,
			usage: "replay the rows whose --timestamp-column (else the default table's created_at) is at or after this time (RFC 3339, e.g. 2026-12-01T10:00:00Z, or a date 2026-12-01, UTC)",
			field: "Replay.Selection.Since",
			bind:  timestamp(func(c *Config) *time.Time { return &c.Replay.Selection.Since })},
		{name: "replay-until", group: GroupReplay,
			usage: "replay the rows whose --timestamp-column is before this time (as --replay-since)",
			field: "Replay.Selection.Until",
			bind:  timestamp(func(c *Config) *time.Time { return &c.Replay.Selection.Until })},
		{name: "replay-where", group: GroupReplay,
			usage: "replay the rows matching this SQL predicate over the table, checked as --backfill-where (read in read-only transactions) and refused when it reads another table, e.g. \"topic = 'orders'\"",
			field: "Replay.Selection.Where",
			bind:  str(func(c *Config) *string { return &c.Replay.Selection.Where }),
			check: func(c *Config) string {
				if w := c.Replay.Selection.Where; w != "" {
					return errText(slot.CheckBackfillWhere(w))
				}
				return ""
			}},
		{name: "replay-topic", group: GroupReplay,
			usage: "send every replayed record to this one topic; default empty: each to its own topic, as the stream chose it",
			field: "Replay.Topic",
			bind:  str(func(c *Config) *string { return &c.Replay.Topic }),
			check: func(c *Config) string {
				if t := c.Replay.Topic; t != "" {
					return errText(outbox.ValidTopic(t))
				}
				return ""
			}},
		{name: "replay-rate", group: GroupReplay,
			usage: "replay at most this many rows a second (averaged over pages of 500 rows); 0: as fast as Kafka acknowledges",
			field: "Replay.Rate",
			bind:  float(func(c *Config) *float64 { return &c.Replay.Rate }),
			check: func(c *Config) string {
				if c.Replay.Rate < 0 {
					return "must not be negative"
				}
				return ""
			}},
		{name: "dry-run", group: GroupReplay, usage: "count the rows the replay would publish (and say what the table no longer holds), and publish nothing",
			field: "Replay.DryRun",
			bind:  boolean(func(c *Config) *bool { return &c.Replay.DryRun })},
		{name: "id-column", group: GroupColumns,
			usage: "the outbox id column (bigint, integer, smallint, uuid, text or varchar): header id, its text form, the consumers' idempotency key",
			bind:  str(func(c *Config) *string { return &c.Stream.Columns.ID }),
			check: func(c *Config) string { return nonEmpty(c.Stream.Columns.ID) }},
		{name: "key-column", group: GroupColumns, usage: "the record key column (uuid, text, varchar or an integer, as its decimal text): one key's records stay in order on one partition; not read with --no-key",
			bind:  str(func(c *Config) *string { return &c.Stream.Columns.Key }),
			check: func(c *Config) string { return nonEmpty(c.Stream.Columns.Key) }},
		{name: "no-key", group: GroupColumns, usage: "publish records without a key: Kafka spreads them over the topic's partitions, so there is no per-aggregate order (default false: --key-column is the key)",
			bind: boolean(func(c *Config) *bool { return &c.Stream.Columns.NoKey })},
		{name: "topic-column", group: GroupColumns, usage: "the topic column (text or varchar); not read with --topic-template",
			bind: str(func(c *Config) *string { return &c.Stream.Columns.Topic })},
		{name: "topic-template", group: GroupColumns,
			usage: "build the topic from columns instead of --topic-column: text with {column} placeholders, e.g. 'orders.{aggregatetype}' " +
				"(placeholder columns text, varchar, uuid or integer; NULL or empty in a row makes it unreadable: the run stops at it, or --dead-letter-topic takes it); no placeholder: one topic for every row",
			bind: str(func(c *Config) *string { return &c.Stream.Columns.TopicTemplate }),
			check: func(c *Config) string {
				return errText(layout.Columns{TopicTemplate: c.Stream.Columns.TopicTemplate}.Validate())
			}},
		{name: "payload-column", group: GroupColumns, usage: "the record value column (jsonb, json, bytea, text or varchar); NULL is a tombstone",
			bind:  str(func(c *Config) *string { return &c.Stream.Columns.Payload }),
			check: func(c *Config) string { return nonEmpty(c.Stream.Columns.Payload) }},
		{name: "headers-column", group: GroupColumns, usage: "a jsonb or json column whose object members become headers; the table may lack it",
			bind:  str(func(c *Config) *string { return &c.Stream.Columns.Headers }),
			check: func(c *Config) string { return nonEmpty(c.Stream.Columns.Headers) }},
		{name: "header-columns", group: GroupColumns,
			usage: "COLUMN[,COLUMN...]: also place these columns as headers named after them, after the id header, value the column's text form (NULL: a null header value)",
			bind: func(fs *flag.FlagSet, c *Config, name, usage string) {
				fs.Var((*stringList)(&c.Stream.Columns.HeaderColumns), name, usage)
			},
			check: func(c *Config) string {
				m := c.Mapping()
				return errText(layout.Columns{HeaderColumns: c.Stream.Columns.HeaderColumns, Shape: m.Shape, CloudEvents: m.CloudEvents}.Validate())
			}},
		{name: "timestamp-column", group: GroupColumns,
			usage: "a timestamptz or timestamp (taken as UTC) column whose value is the record timestamp; NULL in a row: the commit time (empty: always the commit time)",
			field: "Stream.Columns.Timestamp",
			bind:  str(func(c *Config) *string { return &c.Stream.Columns.Timestamp })},

		{name: "message-prefix", group: GroupColumns,
			usage: "also publish table-less events: each transactional logical decoding message with exactly this prefix, its content a JSON envelope {\"topic\", \"key\", \"headers\", \"payload\"} " +
				"(migrate installs outboxd_emit(topic, payload, key, headers, prefix) to write one), in commit order with the transaction's rows; the id header is the message's LSN. " +
				"A malformed envelope or a non-transactional message under the prefix stops the run like an unreadable row (or goes to --dead-letter-topic). Empty: off (outboxd_emit's default prefix is outboxd.event)",
			bind: str(func(c *Config) *string { return &c.Stream.Columns.MessagePrefix }),
			check: func(c *Config) string {
				return errText(layout.Columns{MessagePrefix: c.Stream.Columns.MessagePrefix}.Validate())
			}},
		{name: "table-columns", group: GroupColumns,
			usage: "TABLE:SETTING=VALUE[,...]: a table's own column mapping, for one publication over outbox tables of more than one shape. " +
				"SETTING is one of " + tableSettings + ", and replaces that flag for the rows of TABLE (schema-qualified, SQL syntax); what a table does not set is the flag's, and the layout is the pipeline's. " +
				"One setting an item; header-columns items add up (header-columns= alone: none). E.g. billing.outbox:id-column=event_id,billing.outbox:payload-column=body. run refuses a table the publication does not publish",
			field: "Stream.Columns.Tables",
			bind: func(fs *flag.FlagSet, c *Config, name, usage string) {
				fs.Var((*stringList)(&c.TableColumns), name, usage)
			},
			check: func(c *Config) string {
				_, problems := parseTableColumns(c.TableColumns)
				if len(problems) > 0 {
					return strings.Join(problems, "; ")
				}
				return errText(errors.Join(c.Mapping().ValidateTables()...))
			}},
		{name: "layout", group: GroupColumns,
			usage: "default: records as the column flags say. debezium: records as Debezium 3.6's outbox EventRouter makes them from its outbox table (id uuid, aggregatetype, aggregateid, type, payload), " +
				"with the worker's converters of --debezium-key-converter and --debezium-value-converter, extended.headers.enabled=false and the default header converter: topic from --debezium-route-topic-replacement, " +
				"key --key-column (default aggregateid), value --payload-column, header id, then --debezium-table-fields-additional-placement; a drop-in for Kafka Connect (docs/layouts.md, Replacing Debezium)",
			bind: str(func(c *Config) *string { return &c.Shape.Layout }),
			check: func(c *Config) string {
				switch c.Shape.Layout {
				case LayoutDefault:
					return ""
				case LayoutDebezium:
					var problems []string
					if c.Shape.CloudEvents {
						problems = append(problems, "CloudEvents and the Debezium layout do not go together: Debezium's records have no CloudEvents attributes")
					}
					if c.Stream.Columns.TopicTemplate != "" || len(c.Stream.Columns.HeaderColumns) > 0 {
						problems = append(problems, "the Debezium layout routes and places headers itself: use --debezium-route-topic-replacement and --debezium-table-fields-additional-placement, not --topic-template or --header-columns")
					}
					if _, err := layout.ParsePlacements(c.Shape.DZPlacement); err != nil {
						problems = append(problems, err.Error())
					}
					if err := c.Mapping().Validate(); err != nil && len(problems) == 0 {
						problems = append(problems, errText(err))
					}
					return strings.Join(problems, "; ")
				}
				return "\"" + c.Shape.Layout + "\" is not default or debezium"
			}},
		{name: "debezium-route-by-field", group: GroupColumns, usage: "--layout debezium: route.by.field, the column whose value is ${routedByValue} in the topic",
			bind: str(func(c *Config) *string { return &c.Shape.DZ.RouteByField }), check: func(c *Config) string { return nonEmpty(c.Shape.DZ.RouteByField) }},
		{name: "debezium-route-topic-replacement", group: GroupColumns, usage: "--layout debezium: route.topic.replacement, the topic with ${routedByValue} for the --debezium-route-by-field column's value (an empty value too)",
			bind: str(func(c *Config) *string { return &c.Shape.DZ.RouteTopicReplacement }), check: func(c *Config) string { return nonEmpty(c.Shape.DZ.RouteTopicReplacement) }},
		{name: "debezium-table-fields-additional-placement", group: GroupColumns,
			usage: "--layout debezium: table.fields.additional.placement, COLUMN:header[:ALIAS],...: these columns as headers after id, written as Debezium's header converter writes them (envelope and partition placement are not supported)",
			bind:  str(func(c *Config) *string { return &c.Shape.DZPlacement })},
		{name: "debezium-table-expand-json-payload", group: GroupColumns,
			usage: "--layout debezium: table.expand.json.payload, the JSON payload expanded as Debezium and JsonConverter write it (needs --debezium-value-converter json)",
			bind:  boolean(func(c *Config) *bool { return &c.Shape.DZ.ExpandJSONPayload })},
		{name: "debezium-key-converter", group: GroupColumns, usage: "--layout debezium: the worker's key.converter: string (StringConverter) or json (JsonConverter with schemas.enable=false)",
			bind: str(func(c *Config) *string { return &c.Shape.DZ.KeyConverter })},
		{name: "debezium-value-converter", group: GroupColumns, usage: "--layout debezium: the worker's value.converter: string (StringConverter) or json (JsonConverter with schemas.enable=false)",
			bind: str(func(c *Config) *string { return &c.Shape.DZ.ValueConverter })},
		{name: "debezium-tracing-span-context-field", group: GroupColumns,
			usage: "--layout debezium: a text column holding trace context as Debezium's tracingspancontext does (java.util.Properties text: traceparent=..., tracestate=...), placed as headers traceparent and tracestate, unchanged (empty: off)",
			bind:  str(func(c *Config) *string { return &c.Shape.DZ.TracingSpanContextField })},
		{name: "cloudevents", group: GroupColumns,
			usage: "make every record a CloudEvent 1.0 in the Kafka binding's binary content mode: the value stays the payload, and headers ce_specversion, ce_id (the outbox id), ce_source, ce_type, ce_time (the record timestamp) and content-type follow the id header",
			bind:  boolean(func(c *Config) *bool { return &c.Shape.CloudEvents })},
		{name: "cloudevents-source", group: GroupColumns, usage: "with --cloudevents: ce_source, a URI-reference naming the producer, e.g. /orders (required)",
			bind: str(func(c *Config) *string { return &c.Shape.CE.Source }),
			check: func(c *Config) string {
				if !c.Shape.CloudEvents {
					return ""
				}
				return errText(layout.Columns{Shape: layout.ShapeCloudEvents, CloudEvents: c.Shape.CE}.Validate())
			}},
		{name: "cloudevents-type", group: GroupColumns, usage: "with --cloudevents: ce_type, fixed (com.example.order.created) or a template over columns like --topic-template (com.example.{type}) (required)",
			bind: str(func(c *Config) *string { return &c.Shape.CE.Type })},
		{name: "cloudevents-content-type", group: GroupColumns, usage: "with --cloudevents: the content-type header, the payload's media type",
			bind:  str(func(c *Config) *string { return &c.Shape.CE.ContentType }),
			check: func(c *Config) string { return nonEmpty(c.Shape.CE.ContentType) }},

		{name: "source", group: GroupStream,
			usage: "the name of where the records come from in their outboxd.source header (then \"<source>/<schema.table>\"), in place of the server's \"<system identifier>/<database>\": " +
				"a name that outlives the cluster (pg_upgrade, a dump restored, a move), so that consumers deduplicating on source and id recognise events published again after it. " +
				"Unique to the database; set it to what the records carry today to keep their source (docs/layouts.md). Empty: the server's",
			field: "Stream.Source",
			bind:  str(func(c *Config) *string { return &c.Stream.Source })},
		{name: "status-interval", group: GroupStream, usage: "longest time between standby status updates; keep well below the server's wal_sender_timeout",
			field: "Stream.StatusInterval",
			bind:  duration(func(c *Config) *time.Duration { return &c.Stream.StatusInterval }), check: positive(func(c *Config) time.Duration { return c.Stream.StatusInterval })},
		{name: "idle-wait", group: GroupStream, usage: "longest the reader sleeps when nothing is due: no message, every transaction received confirmed (until then it wakes every 100 ms), no status on schedule. It bounds how late an idle stream checks --server-timeout; shorter wakes outboxd more often when idle",
			field: "Stream.IdleWait",
			bind:  duration(func(c *Config) *time.Duration { return &c.Stream.IdleWait }), check: positive(func(c *Config) time.Duration { return c.Stream.IdleWait })},
		{name: "read-linger", group: GroupStream, usage: fmt.Sprintf("trade latency for CPU at steady rates: while transactions come fast enough that at least %d are expected within this time, wait up to this long after each and read what came meanwhile in one go (one wake-up, one produce request). Adds up to this much to each event's latency; a slower stream is read as it arrives. The default engages from %.0f transactions a second; 0: off, every transaction read as it arrives. At most %s; plain TCP on Linux only, with raw I/O on ("+rawio.EnvVar+"=off turns it off, and this default with it)",
			cdc.LingerMinTransactions, cdc.LingerEngagesFrom(cdc.DefaultReadLinger), cdc.MaxReadLinger),
			field: "Stream.ReadLinger",
			bind:  duration(func(c *Config) *time.Duration { return &c.Stream.ReadLinger }),
			// The library reads without a linger where it cannot linger
			// (TLS, not Linux, raw I/O off); the command refuses one asked
			// for, rather than not do it silently.
			check: func(c *Config) string {
				if v := c.Stream.ReadLinger; v > 0 && v <= cdc.MaxReadLinger && !rawio.Enabled() { // out of range: cdc says so
					return "needs raw I/O, which " + rawio.EnvVar + "=off turns off (the linger is a raised socket low-water mark): set it to 0, or turn raw I/O on"
				}
				return ""
			}},
		{name: "server-timeout", group: GroupStream,
			usage: "how long PostgreSQL may stay silent on the replication connection (a status after --status-interval of silence asks it for a reply), and how long setting a session up may take, before the connection is taken for broken and replaced: a network partition or a half-open TCP connection never errors by itself. Keep it above the server's wal_sender_timeout/2 plus --status-interval (a walsender replaying a long transaction of unpublished changes answers only that often; a warning says so); must exceed --status-interval",
			field: "Stream.ServerTimeout",
			bind:  duration(func(c *Config) *time.Duration { return &c.Stream.ServerTimeout }),
			check: positive(func(c *Config) time.Duration { return c.Stream.ServerTimeout }),
		},
		{name: "shutdown-timeout", group: GroupStream, usage: "on SIGTERM/SIGINT, how long to finish the open transaction, wait for Kafka and confirm",
			field: "Stream.ShutdownTimeout",
			bind:  duration(func(c *Config) *time.Duration { return &c.Stream.ShutdownTimeout }), check: positive(func(c *Config) time.Duration { return c.Stream.ShutdownTimeout })},
		{name: "slot-retry-interval", group: GroupStream, usage: "how often a standby retries a slot another process is using",
			field: "Stream.SlotRetryInterval",
			bind:  duration(func(c *Config) *time.Duration { return &c.Stream.SlotRetryInterval }), check: positive(func(c *Config) time.Duration { return c.Stream.SlotRetryInterval })},
		{name: "reconnect-max-interval", group: GroupStream, usage: "longest wait between reconnects after a lost connection (exponential backoff)",
			field: "Stream.ReconnectMaxInterval",
			bind:  duration(func(c *Config) *time.Duration { return &c.Stream.ReconnectMaxInterval }), check: positive(func(c *Config) time.Duration { return c.Stream.ReconnectMaxInterval })},

		{name: "max-in-flight-records", group: GroupPump, usage: "records sent to Kafka and not yet acknowledged, at most; bounds memory and the duplicates after a crash",
			field: "Pump.MaxInFlightRecords",
			bind:  integer(func(c *Config) *int { return &c.Pump.MaxInFlightRecords }), check: positiveInt(func(c *Config) int { return c.Pump.MaxInFlightRecords })},
		{name: "max-in-flight-bytes", group: GroupPump, usage: "key, value and header bytes of those records, at most: with large payloads this bounds memory (a single larger record is still sent, alone)",
			field: "Pump.MaxInFlightBytes",
			bind:  integer(func(c *Config) *int { return &c.Pump.MaxInFlightBytes }), check: positiveInt(func(c *Config) int { return c.Pump.MaxInFlightBytes })},
		{name: "in-flight-budget-bytes", process: true, group: GroupPump,
			usage: "the process's records in flight, every pipeline's together: their key, value and header bytes at most, shared fairly (each pipeline keeps a share no other can take; --max-in-flight-bytes still bounds each). " +
				"0: a quarter of the memory limit (GOMEMLIMIT, or else 90 % of the container's memory limit, which outboxd then sets as GOMEMLIMIT), or 256 MiB without one",
			bind: integer(func(c *Config) *int { return &c.Process.InFlightBudgetBytes }), check: notNegative(func(c *Config) int { return c.Process.InFlightBudgetBytes })},
		{name: "in-flight-budget-records", process: true, group: GroupPump,
			usage: "the process's records in flight, every pipeline's together, at most (shared as --in-flight-budget-bytes is); 0: one for each KiB of that budget",
			bind:  integer(func(c *Config) *int { return &c.Process.InFlightBudgetRecords }), check: notNegative(func(c *Config) int { return c.Process.InFlightBudgetRecords })},
		{name: "dead-letter-topic", group: GroupPump,
			usage: "send a record Kafka refuses for good (too large, invalid or deleted topic, denied) or a row that cannot become a record to this topic, with headers saying why and an Error log naming it, and move on (empty: stop at it, the default: nothing is ever skipped; not with --delivery exactly-once). " +
				"Checked at start without creating it: a missing one stops the run, or with --allow-auto-topic-creation is created then with the broker's default partitions and replication factor",
			field: "Pump.DeadLetterTopic",
			bind:  str(func(c *Config) *string { return &c.Pump.DeadLetterTopic })},

		{name: "brokers", group: GroupKafka, usage: "Kafka bootstrap brokers, HOST:PORT[,HOST:PORT...] (required)",
			field: "Kafka.Brokers",
			bind: func(fs *flag.FlagSet, c *Config, name, usage string) {
				fs.Var((*stringList)(&c.Kafka.Brokers), name, usage)
			},
		},
		{name: "max-record-bytes", group: GroupKafka,
			usage: "largest record batch sent, framing included (Kafka's max.message.bytes); a record too large for it alone is refused before sending; raise it only as far as every topic allows, since batches of small records grow up to it",
			field: "Kafka.MaxRecordBytes",
			bind:  integer(func(c *Config) *int { return &c.Kafka.MaxRecordBytes }),
			check: positiveInt(func(c *Config) int { return c.Kafka.MaxRecordBytes }),
		},
		{name: "linger", group: GroupKafka, usage: "how long a Kafka batch waits for more records (0: send at once; raise for throughput at the cost of latency)",
			field: "Kafka.Linger",
			bind:  duration(func(c *Config) *time.Duration { return &c.Kafka.Linger }),
		},
		{name: "compression", group: GroupKafka,
			usage: "codec of the batches sent to Kafka: none, gzip, snappy, lz4 or zstd; a batch goes compressed only where that makes it smaller, and every consumer must decode the codec",
			field: "Kafka.Compression",
			bind:  str(func(c *Config) *string { return &c.Kafka.Compression }),
			check: func(c *Config) string { return nonEmpty(c.Kafka.Compression) },
		},
		{name: "allow-auto-topic-creation", group: GroupKafka, usage: "let the broker create unknown topics (needs auto.create.topics.enable); otherwise a record for an unknown topic stops the run. " +
			"A missing --dead-letter-topic is created at start instead (CreateTopics with the broker's defaults: needs the CREATE ACL, not auto.create.topics.enable)",
			field: "Kafka.AllowAutoTopicCreation",
			bind:  boolean(func(c *Config) *bool { return &c.Kafka.AllowAutoTopicCreation })},
		{name: "kafka-tls", group: GroupKafka, usage: "connect to Kafka with TLS (system CAs unless --kafka-tls-ca-file)",
			field: "Kafka.TLS.Enabled",
			bind:  boolean(func(c *Config) *bool { return &c.Kafka.TLS.Enabled })},
		{name: "kafka-tls-ca-file", group: GroupKafka, usage: "PEM file of the CA(s) that signed the brokers' certificates (implies --kafka-tls)",
			field: "Kafka.TLS.CAFile",
			bind:  str(func(c *Config) *string { return &c.Kafka.TLS.CAFile }), check: readable(func(c *Config) string { return c.Kafka.TLS.CAFile })},
		{name: "kafka-tls-cert-file", group: GroupKafka, usage: "PEM client certificate for mutual TLS (with --kafka-tls-key-file)",
			field: "Kafka.TLS.CertFile",
			bind:  str(func(c *Config) *string { return &c.Kafka.TLS.CertFile }), check: readable(func(c *Config) string { return c.Kafka.TLS.CertFile })},
		{name: "kafka-tls-key-file", group: GroupKafka, usage: "PEM client key for mutual TLS",
			field: "Kafka.TLS.KeyFile",
			bind:  str(func(c *Config) *string { return &c.Kafka.TLS.KeyFile }), check: readable(func(c *Config) string { return c.Kafka.TLS.KeyFile })},
		{name: "kafka-tls-insecure-skip-verify", group: GroupKafka, usage: "do not verify the brokers' certificates (testing only)",
			field: "Kafka.TLS.InsecureSkipVerify",
			bind:  boolean(func(c *Config) *bool { return &c.Kafka.TLS.InsecureSkipVerify })},
		{name: "kafka-sasl-mechanism", group: GroupKafka, usage: "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: none); use with TLS, PLAIN sends the password as is",
			field: "Kafka.SASL.Mechanism",
			bind:  str(func(c *Config) *string { return &c.Kafka.SASL.Mechanism })},
		{name: "kafka-sasl-username", group: GroupKafka, usage: "SASL user name",
			field: "Kafka.SASL.Username",
			bind:  str(func(c *Config) *string { return &c.Kafka.SASL.Username })},
		{name: "kafka-sasl-password", group: GroupKafka, usage: "SASL password (prefer --kafka-sasl-password-file or the environment variable: flags show in ps)",
			field: "Kafka.SASL.Password",
			bind:  str(func(c *Config) *string { return &c.Kafka.SASL.Password }), show: secret},
		{name: "kafka-sasl-password-file", group: GroupKafka, fileOf: "kafka-sasl-password",
			usage: "file holding the --kafka-sasl-password, e.g. a mounted secret (its trailing newline and spaces left out); not with --kafka-sasl-password",
			bind:  secretFileFlag(func(c *Config) *string { return &c.Files.KafkaSASLPasswordFile }, func(c *Config) *string { return &c.Kafka.SASL.Password })},

		{name: "delivery", group: GroupDelivery,
			usage: "at-least-once: each record is acknowledged on its own and a crash sends the unconfirmed tail again (consumers dedupe on the id header). " +
				"exactly-once: records go in Kafka transactions with a progress record, and a restart or takeover resumes exactly after the last committed one; " +
				"consumers must read with isolation.level=read_committed (a read_uncommitted consumer also sees aborted records); needs Kafka transactions allowed for the transactional id, and no --dead-letter-topic",
			bind:  str(func(c *Config) *string { return &c.Delivery }),
			field: "Delivery"},
		{name: "transactional-id", group: GroupDelivery,
			usage: "exactly-once: Kafka transactional id; every process publishing the slot must share it, and a standby taking over fences the one it replaces; changing it starts exactly-once progress anew (the slot's unconfirmed tail is published again) (empty: outboxd-<slot>-<the server's system identifier>)",
			field: "Txn.TransactionalID",
			bind:  str(func(c *Config) *string { return &c.Txn.TransactionalID })},
		{name: "progress-topic", group: GroupDelivery,
			usage: "exactly-once: compacted topic holding each slot's last committed position, written in the same transactions; created (1 partition, cleanup.policy=compact) when missing",
			field: "Txn.ProgressTopic",
			bind:  str(func(c *Config) *string { return &c.Txn.ProgressTopic }),
			check: func(c *Config) string { return nonEmpty(c.Txn.ProgressTopic) }},
		{name: "transaction-interval", group: GroupDelivery,
			usage: "exactly-once: longest a Kafka transaction stays open, holding many PostgreSQL transactions; longer means fewer commits but later visibility to read_committed consumers",
			field: "Txn.Interval",
			bind:  duration(func(c *Config) *time.Duration { return &c.Txn.Interval }), check: positive(func(c *Config) time.Duration { return c.Txn.Interval })},
		{name: "transaction-max-records", group: GroupDelivery,
			usage: "exactly-once: a Kafka transaction commits early once it holds this many records (keep below --max-in-flight-records)",
			field: "Txn.MaxRecords",
			bind:  integer(func(c *Config) *int { return &c.Txn.MaxRecords }), check: positiveInt(func(c *Config) int { return c.Txn.MaxRecords })},
		{name: "transaction-timeout", group: GroupDelivery,
			usage: "exactly-once: Kafka aborts a transaction open longer (a stalled publisher); must not exceed the brokers' transaction.max.timeout.ms (Kafka's default 15m) and must exceed --transaction-interval",
			field: "Txn.Timeout",
			bind:  duration(func(c *Config) *time.Duration { return &c.Txn.Timeout }),
			check: positive(func(c *Config) time.Duration { return c.Txn.Timeout }),
		},

		{name: "value-format", group: GroupRegistry,
			usage: "what a record's value becomes: json (the payload as stored, no registry), avro, protobuf or json-schema: the payload's JSON encoded per the schema registered for it (see --schema-registry-url), " +
				"framed in the Confluent wire format; a payload that does not fit goes to --dead-letter-topic raw with the reason, or stops the run naming the row and the schema. " +
				"A schema of type string (or bytes) takes the payload's text as it is",
			field: "Registry.Value.Format",
			bind:  str(func(c *Config) *string { return &c.Registry.Value.Format }),
			// With the Debezium layout it must be json or take the string value
			// converter's place: pipeline.Config's rule (Problems).
		},
		{name: "key-format", group: GroupRegistry,
			usage: "what a record's key becomes, as --value-format: json (the key column's text as it is), avro, protobuf or json-schema. A key schema of type string takes the text as it is, any other the text as JSON",
			field: "Registry.Key.Format",
			bind:  str(func(c *Config) *string { return &c.Registry.Key.Format }),
			check: func(c *Config) string {
				if c.Shape.Layout == LayoutDebezium && c.Registry.Key.Format != format.JSON && c.Shape.DZ.KeyConverter != layout.ConverterString {
					return "with --layout debezium, a schema format takes the place of Debezium's key converter: give --debezium-key-converter string"
				}
				return ""
			}},
		{name: "schema-registry-url", group: GroupRegistry,
			usage: "schema registry URL(s), http(s)://HOST:PORT[/path][,...] (Confluent's API; Apicurio's is at /apis/ccompat/v7): required with a --value-format or --key-format other than json",
			field: "Registry.URLs",
			bind: func(fs *flag.FlagSet, c *Config, name, usage string) {
				fs.Var((*stringList)(&c.Registry.URLs), name, usage)
			}},
		{name: "schema-registry-username", group: GroupRegistry, usage: "schema registry user for HTTP basic auth",
			field: "Registry.Username",
			bind:  str(func(c *Config) *string { return &c.Registry.Username })},
		{name: "schema-registry-password", group: GroupRegistry, usage: "schema registry password for HTTP basic auth (prefer --schema-registry-password-file or the environment variable: flags show in ps)",
			bind: str(func(c *Config) *string { return &c.Registry.Password }), show: secret},
		{name: "schema-registry-password-file", group: GroupRegistry, fileOf: "schema-registry-password",
			usage: "file holding the --schema-registry-password, e.g. a mounted secret (its trailing newline and spaces left out); not with --schema-registry-password",
			bind:  secretFileFlag(func(c *Config) *string { return &c.Files.RegistryPasswordFile }, func(c *Config) *string { return &c.Registry.Password })},
		{name: "schema-registry-tls-ca-file", group: GroupRegistry, usage: "PEM file of the CA(s) that signed an https registry's certificate (default: the system's)",
			bind: str(func(c *Config) *string { return &c.Files.RegistryTLSCAFile }), check: readable(func(c *Config) string { return c.Files.RegistryTLSCAFile })},
		{name: "schema-registry-tls-cert-file", group: GroupRegistry, usage: "PEM client certificate for mutual TLS with the registry (with --schema-registry-tls-key-file)",
			bind: str(func(c *Config) *string { return &c.Files.RegistryTLSCertFile }),
			check: func(c *Config) string {
				if msg := readable(func(c *Config) string { return c.Files.RegistryTLSCertFile })(c); msg != "" {
					return msg
				}
				if (c.Files.RegistryTLSCertFile == "") != (c.Files.RegistryTLSKeyFile == "") {
					return "a client certificate needs --schema-registry-tls-key-file and a key needs --schema-registry-tls-cert-file"
				}
				return ""
			}},
		{name: "schema-registry-tls-key-file", group: GroupRegistry, usage: "PEM client key for mutual TLS with the registry",
			bind: str(func(c *Config) *string { return &c.Files.RegistryTLSKeyFile }), check: readable(func(c *Config) string { return c.Files.RegistryTLSKeyFile })},
		{name: "subject-name-strategy", group: GroupRegistry,
			usage: "the subject a record's schema is under: topic (<topic>-value, <topic>-key), record (--value-schema-record) or topic-record (<topic>-<record>), as the registry's serializers name them",
			field: "Registry.SubjectStrategy",
			bind:  str(func(c *Config) *string { return &c.Registry.SubjectStrategy })},
		{name: "value-schema-record", group: GroupRegistry,
			usage: "the value schema's record name: an Avro record's full name, a Protobuf message's (also the message encoded; default: the file's first), a JSON Schema's title; names the subject with the record and topic-record strategies",
			field: "Registry.Value.Record",
			bind:  str(func(c *Config) *string { return &c.Registry.Value.Record })},
		{name: "key-schema-record", group: GroupRegistry, usage: "the key schema's record name, as --value-schema-record",
			field: "Registry.Key.Record",
			bind:  str(func(c *Config) *string { return &c.Registry.Key.Record })},
		{name: "value-schema-version", group: GroupRegistry,
			usage: "pin the value subject's schema version (0: the latest, looked up again every --schema-refresh-interval and before a payload is refused)",
			field: "Registry.Value.Version",
			bind:  integer(func(c *Config) *int { return &c.Registry.Value.Version })},
		{name: "key-schema-version", group: GroupRegistry, usage: "pin the key subject's schema version (0: the latest)",
			field: "Registry.Key.Version",
			bind:  integer(func(c *Config) *int { return &c.Registry.Key.Version })},
		{name: "value-schema-id", group: GroupRegistry, usage: "pin the value schema by its registry id, whatever the subject holds (0: by subject)",
			field: "Registry.Value.ID",
			bind:  integer(func(c *Config) *int { return &c.Registry.Value.ID })},
		{name: "key-schema-id", group: GroupRegistry, usage: "pin the key schema by its registry id (0: by subject)",
			field: "Registry.Key.ID",
			bind:  integer(func(c *Config) *int { return &c.Registry.Key.ID })},
		{name: "auto-register-schemas", group: GroupRegistry,
			usage: "register --value-schema and --key-schema under their subjects when a record first needs them, and use them (off: use only what the registry holds, as most shops require)",
			field: "Registry.AutoRegister",
			bind:  boolean(func(c *Config) *bool { return &c.Registry.AutoRegister })},
		{name: "value-schema", group: GroupRegistry, usage: "the value schema's text that --auto-register-schemas registers",
			field: "Registry.Value.Schema",
			bind:  str(func(c *Config) *string { return &c.Registry.Value.Schema }), show: sizeOnly},
		{name: "value-schema-file", group: GroupRegistry, fileOf: "value-schema",
			usage: "file holding the --value-schema (an .avsc, .proto or JSON Schema file); not with --value-schema",
			bind:  secretFileFlag(func(c *Config) *string { return &c.Files.ValueSchemaFile }, func(c *Config) *string { return &c.Registry.Value.Schema })},
		{name: "key-schema", group: GroupRegistry, usage: "the key schema's text that --auto-register-schemas registers",
			field: "Registry.Key.Schema",
			bind:  str(func(c *Config) *string { return &c.Registry.Key.Schema }), show: sizeOnly},
		{name: "key-schema-file", group: GroupRegistry, fileOf: "key-schema",
			usage: "file holding the --key-schema; not with --key-schema",
			bind:  secretFileFlag(func(c *Config) *string { return &c.Files.KeySchemaFile }, func(c *Config) *string { return &c.Registry.Key.Schema })},
		{name: "schema-refresh-interval", group: GroupRegistry, usage: "how often the latest schema of a subject in use is looked up again, so that a new version is taken up",
			field: "Registry.RefreshInterval",
			bind:  duration(func(c *Config) *time.Duration { return &c.Registry.RefreshInterval }), check: positive(func(c *Config) time.Duration { return c.Registry.RefreshInterval })},

		{name: "metrics-addr", process: true, group: GroupOps, usage: "serve Prometheus /metrics, /healthz, /readyz and /pipelines on this address, e.g. :9187 (empty: off)",
			bind: str(func(c *Config) *string { return &c.Process.MetricsAddr }),
			check: func(c *Config) string {
				if c.Process.MetricsAddr == "" {
					return ""
				}
				if _, _, err := net.SplitHostPort(c.Process.MetricsAddr); err != nil {
					return "\"" + c.Process.MetricsAddr + "\" is not HOST:PORT or :PORT"
				}
				return ""
			}},
		{name: "pprof", process: true, group: GroupOps, usage: "also serve Go's profiler at /debug/pprof/ on --metrics-addr (for diagnosing; keep the address private)",
			bind: boolean(func(c *Config) *bool { return &c.Process.Pprof })},
		{name: "max-procs", process: true, group: GroupOps,
			usage: "CPU cores the Go runtime uses at once (GOMAXPROCS, which this overrides; 0: leave it to Go, all cores unless GOMAXPROCS is set). One slot is sent by one walsender process and one core keeps up with it; more cost CPU per event at steady rates",
			bind:  integer(func(c *Config) *int { return &c.Process.MaxProcs }),
			check: func(c *Config) string {
				if c.Process.MaxProcs < 0 {
					return "must not be negative"
				}
				return ""
			}},
		{name: "wal-check-interval", group: GroupOps, usage: "how often to check the WAL the slot retains (and whether PostgreSQL invalidated it)",
			field: "Monitor.Interval",
			bind:  duration(func(c *Config) *time.Duration { return &c.Monitor.Interval }), check: positive(func(c *Config) time.Duration { return c.Monitor.Interval })},
		{name: "wal-retained-warn-bytes", group: GroupOps, usage: "log a warning when the slot retains more WAL than this many bytes",
			field: "Monitor.WarnBytes",
			bind: func(fs *flag.FlagSet, c *Config, name, usage string) {
				fs.Int64Var(&c.Monitor.WarnBytes, name, c.Monitor.WarnBytes, usage)
			},
			check: func(c *Config) string {
				if c.Monitor.WarnBytes <= 0 {
					return "must be positive"
				}
				return ""
			}},
		{name: "paused", group: GroupOps,
			usage: "run the pipeline paused: read nothing from the slot and send nothing to Kafka, the slot kept at its confirmed position (its WAL grows; outboxd_slot_retained_wal_bytes watches it). " +
				"A running pipeline paused drains, waits for Kafka and confirms first; resumed, it goes on from the confirmed position. " +
				"In a pipelines file: set paused: true on the pipeline and reload (SIGHUP); without one: SIGUSR1 pauses, SIGUSR2 resumes (docs/operating.md, Pausing a pipeline)",
			field: "Paused",
			bind:  boolean(func(c *Config) *bool { return &c.Paused })},
		{name: "heartbeat-interval", group: GroupOps, usage: "write a pg_logical_emit_message heartbeat this often (0: off; only needed where keepalives do not advance an idle slot)",
			bind:  duration(func(c *Config) *time.Duration { return &c.Heartbeat }),
			field: "Heartbeat"},

		{name: "replica", process: true, group: GroupFleet,
			usage: "with --config: this replica's number, 0 to --replicas minus 1 (default: the number after the last - of the host name, a StatefulSet pod's ordinal, when --replicas is above 1); one beyond (a StatefulSet scaled past --replicas) stands by for every pipeline, ranked last",
			bind:  integer(func(c *Config) *int { return &c.Process.Fleet.Replica }),
			check: func(c *Config) string {
				if c.Process.Fleet.Replica < -1 {
					return "must not be negative"
				}
				return "" // one beyond --replicas ranks last (fleet.Rank)
			}},
		{name: "replicas", process: true, group: GroupFleet,
			usage: "with --config: how many replicas run the same pipelines file; each pipeline runs on one of them, the slot being the lease (docs/fleet.md)",
			field: "Fleet.Replicas",
			bind:  integer(func(c *Config) *int { return &c.Process.Fleet.Replicas }), check: positiveInt(func(c *Config) int { return c.Process.Fleet.Replicas })},
		{name: "rank-delay", process: true, group: GroupFleet,
			usage: "with --config and several replicas: how long a replica waits per rank before it first tries a pipeline, and before it takes a slot another replica released; keep it above --slot-retry-interval (docs/fleet.md)",
			bind:  duration(func(c *Config) *time.Duration { return &c.Process.Fleet.RankDelay }), check: positive(func(c *Config) time.Duration { return c.Process.Fleet.RankDelay })},
		{name: "log-level", process: true, group: GroupLog, usage: "log level: debug, info, warn, error",
			bind: str(func(c *Config) *string { return &c.Process.LogLevel }),
			check: func(c *Config) string {
				var l slog.Level
				if err := l.UnmarshalText([]byte(c.Process.LogLevel)); err != nil {
					return "\"" + c.Process.LogLevel + "\" is not debug, info, warn or error"
				}
				return ""
			}},
		{name: "log-format", process: true, group: GroupLog, usage: "log format: text or json",
			bind: str(func(c *Config) *string { return &c.Process.LogFormat }),
			check: func(c *Config) string {
				if c.Process.LogFormat != "text" && c.Process.LogFormat != "json" {
					return "\"" + c.Process.LogFormat + "\" is not text or json"
				}
				return ""
			}},
	}
}

// Binding helpers: each takes the field's address from a Config.

func str(field func(*Config) *string) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, name, usage string) { fs.StringVar(field(c), name, *field(c), usage) }
}

func float(field func(*Config) *float64) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, name, usage string) { fs.Float64Var(field(c), name, *field(c), usage) }
}

func timestamp(field func(*Config) *time.Time) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, name, usage string) { fs.Var((*timeValue)(field(c)), name, usage) }
}

// timeValue is a time flag: RFC 3339, or a date (midnight UTC).
type timeValue time.Time

func (t *timeValue) String() string {
	if t == nil || time.Time(*t).IsZero() {
		return ""
	}
	return time.Time(*t).UTC().Format(time.RFC3339Nano)
}

func (t *timeValue) Set(s string) error {
	if s == "" {
		*t = timeValue{}
		return nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if v, err := time.Parse(layout, s); err == nil {
			*t = timeValue(v)
			return nil
		}
	}
	return fmt.Errorf("%q is no RFC 3339 time (2026-12-01T10:00:00Z) or date (2026-12-01)", s)
}

func boolean(field func(*Config) *bool) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, name, usage string) { fs.BoolVar(field(c), name, *field(c), usage) }
}

func integer(field func(*Config) *int) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, name, usage string) { fs.IntVar(field(c), name, *field(c), usage) }
}

func duration(field func(*Config) *time.Duration) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, name, usage string) {
		fs.DurationVar(field(c), name, *field(c), usage)
	}
}

// Checks.

func positive(v func(*Config) time.Duration) func(*Config) string {
	return func(c *Config) string {
		if v(c) <= 0 {
			return "must be positive"
		}
		return ""
	}
}

func positiveInt(v func(*Config) int) func(*Config) string {
	return func(c *Config) string {
		if v(c) <= 0 {
			return "must be positive"
		}
		return ""
	}
}

func notNegative(v func(*Config) int) func(*Config) string {
	return func(c *Config) string {
		if v(c) < 0 {
			return "must not be negative"
		}
		return ""
	}
}

// errText is an error's text for a check ("" for nil), its lines joined.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

func nonEmpty(s string) string {
	if s == "" {
		return "must not be empty"
	}
	return ""
}

func readable(path func(*Config) string) func(*Config) string {
	return func(c *Config) string {
		if p := path(c); p != "" && !c.SkipFiles {
			if _, err := os.Stat(p); err != nil {
				return err.Error()
			}
		}
		return ""
	}
}

// sizeOnly shows a long text (a schema) by its size.
func sizeOnly(v string) string {
	if v == "" {
		return ""
	}
	return strconv.Itoa(len(v)) + " bytes"
}

func secret(v string) string {
	if v == "" {
		return ""
	}
	return redacted
}

// days is a duration flag that also takes whole days: 7d.
type days time.Duration

func (d *days) String() string {
	if *d > 0 && time.Duration(*d)%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(time.Duration(*d)/(24*time.Hour)), 10) + "d"
	}
	return time.Duration(*d).String()
}

func (d *days) Set(s string) error {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		v, err := strconv.ParseUint(n, 10, 31)
		if err != nil || v > uint64(math.MaxInt64/int64(24*time.Hour)) {
			return fmt.Errorf("%q: want a whole number of days up to 106751, e.g. 7d", s)
		}
		*d = days(time.Duration(v) * 24 * time.Hour)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: want a duration (90m, 36h) or days (7d)", s)
	}
	*d = days(v)
	return nil
}

// stringList is a comma-separated flag value.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = nil
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			*l = append(*l, b)
		}
	}
	return nil
}
