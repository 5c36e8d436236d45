package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/registry"
)

// severity says how much a finding matters: ok, a warning (something that
// can endanger a pipeline later), or a failure (it would stop one now).
type severity string

const (
	sevOK   severity = "ok"
	sevWarn severity = "warn"
	sevFail severity = "fail"
)

// finding is one result of outboxd doctor: what was checked, of which
// pipeline ("" for a server's), what was found, and what to do.
type finding struct {
	Pipeline string   `json:"pipeline,omitempty"`
	Check    string   `json:"check"`
	Severity severity `json:"severity"`
	Found    string   `json:"found"`
	Fix      string   `json:"fix,omitempty"`
}

// serverFacts are what doctor reads of one PostgreSQL server (one
// connection's), to judge the pipelines that use it.
type serverFacts struct {
	Version  int    // server_version_num
	WALLevel string // wal_level
	// MaxSlots and MaxWALSenders are max_replication_slots and
	// max_wal_senders; Slots the replication slots that exist (every
	// kind: each takes one of max_replication_slots), WALSenders the
	// walsender processes running.
	MaxSlots, MaxWALSenders, Slots, WALSenders int
	// MaxSlotWALKeepMB is max_slot_wal_keep_size in MB (-1: unlimited).
	MaxSlotWALKeepMB int64
	// WALSenderTimeoutMS is wal_sender_timeout in ms (0: never).
	WALSenderTimeoutMS int64
	// IdleSlotTimeoutS is idle_replication_slot_timeout in seconds (18+;
	// 0: off or the server has none).
	IdleSlotTimeoutS int64
	// Replication: the role may replicate (REPLICATION or superuser).
	Replication bool
	Role        string
	// KeepalivesIdleS, KeepalivesIntervalS and KeepalivesCount are the
	// server's TCP keepalive settings for doctor's own connection (0: the
	// operating system's default).
	KeepalivesIdleS, KeepalivesIntervalS, KeepalivesCount int64
}

// pipelineNeed is what one pipeline needs of its server.
type pipelineNeed struct {
	Name string
	// SlotExists: the pipeline's slot is there already (it holds one of
	// max_replication_slots); Streaming: a walsender streams it now.
	SlotExists, Streaming bool
}

// serverFindings judges a server for the pipelines that use it: every
// finding, ok ones too, in a fixed order.
func serverFindings(f serverFacts, pipelines []pipelineNeed) []finding {
	var out []finding
	add := func(check string, sev severity, found, fix string) {
		out = append(out, finding{Check: check, Severity: sev, Found: found, Fix: fix})
	}
	if f.WALLevel == "logical" {
		add("wal_level", sevOK, "logical", "")
	} else {
		add("wal_level", sevFail, f.WALLevel+": logical decoding needs logical",
			"ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL")
	}
	newSlots, streaming := 0, 0
	for _, p := range pipelines {
		if !p.SlotExists {
			newSlots++
		}
		if p.Streaming {
			streaming++
		}
	}
	slots := fmt.Sprintf("%d of max_replication_slots %d in use, %d more needed by %s", f.Slots, f.MaxSlots, newSlots, plural(len(pipelines), "pipeline"))
	switch free := f.MaxSlots - f.Slots; {
	case newSlots > free:
		add("max_replication_slots", sevFail, slots,
			fmt.Sprintf("raise max_replication_slots to at least %d (ALTER SYSTEM, then restart), or drop slots no one uses", f.Slots+newSlots))
	case free-newSlots < 1:
		add("max_replication_slots", sevWarn, slots+": none to spare",
			"raise max_replication_slots: a recovery (--create-slot) or one more pipeline needs one")
	default:
		add("max_replication_slots", sevOK, slots, "")
	}
	// Each pipeline holds a walsender while it streams; those streaming
	// now hold theirs already.
	need := len(pipelines) - streaming
	senders := fmt.Sprintf("%d of max_wal_senders %d running, %d more needed by %s", f.WALSenders, f.MaxWALSenders, need, plural(len(pipelines), "pipeline"))
	if need > f.MaxWALSenders-f.WALSenders {
		add("max_wal_senders", sevFail, senders,
			fmt.Sprintf("raise max_wal_senders to at least %d (ALTER SYSTEM, then restart)", f.WALSenders+need))
	} else {
		add("max_wal_senders", sevOK, senders, "")
	}
	if f.MaxSlotWALKeepMB < 0 {
		add("max_slot_wal_keep_size", sevWarn, "-1 (unlimited): a slot no one reads any more keeps WAL until the disk is full",
			"set max_slot_wal_keep_size (e.g. 100GB, below the free disk space): PostgreSQL then invalidates such a slot instead, and outboxd refuses it with the recovery")
	} else {
		add("max_slot_wal_keep_size", sevOK, strconv.FormatInt(f.MaxSlotWALKeepMB, 10)+"MB", "")
	}
	if f.WALSenderTimeoutMS == 0 {
		add("wal_sender_timeout", sevWarn, "0: a replica that died without closing its connection keeps its slot busy until TCP gives up (hours), and no other replica can take it",
			"set wal_sender_timeout (default 60s)")
	} else {
		add("wal_sender_timeout", sevOK, strconv.FormatInt(f.WALSenderTimeoutMS, 10)+"ms", "")
	}
	sev, found, fix := keepaliveFinding(f)
	add("tcp keepalives", sev, found, fix)
	if f.IdleSlotTimeoutS > 0 {
		add("idle_replication_slot_timeout", sevWarn,
			fmt.Sprintf("%ds: PostgreSQL invalidates a slot no one streamed for that long, so a pipeline paused, stopped or failing longer loses its slot", f.IdleSlotTimeoutS),
			"keep it above the longest pause or outage a pipeline may have, or 0 (off); a lost slot is recovered with run --create-slot --backfill-where")
	}
	if f.Replication {
		add("replication privilege", sevOK, "role "+f.Role+" may replicate", "")
	} else {
		add("replication privilege", sevFail, "role "+f.Role+" has neither REPLICATION nor superuser: run cannot open a replication connection",
			"ALTER ROLE "+f.Role+" REPLICATION (docs/operating.md, Least privilege)")
	}
	return out
}

// keepaliveSlack is how long a dead replica may keep its slot busy before
// doctor warns: the replica ranked next waits that long to take over.
const keepaliveSlack = 5 * time.Minute

// keepaliveFinding judges how fast the server notices a replica that died
// without closing its connection: wal_sender_timeout, else its TCP
// keepalives.
func keepaliveFinding(f serverFacts) (severity, string, string) {
	if f.WALSenderTimeoutMS > 0 {
		return sevOK, fmt.Sprintf("not relied on: wal_sender_timeout (%dms) releases a dead replica's slot", f.WALSenderTimeoutMS), ""
	}
	const fix = "set wal_sender_timeout (default 60s), or tcp_keepalives_idle, tcp_keepalives_interval and tcp_keepalives_count so that they add up to a few minutes"
	if f.KeepalivesIdleS == 0 || f.KeepalivesIntervalS == 0 || f.KeepalivesCount == 0 {
		return sevWarn, "with wal_sender_timeout 0, only TCP keepalives release a dead replica's slot, and the server uses the operating system's defaults (on Linux 2 hours before the first probe)", fix
	}
	after := time.Duration(f.KeepalivesIdleS+f.KeepalivesIntervalS*f.KeepalivesCount) * time.Second
	found := fmt.Sprintf("with wal_sender_timeout 0, TCP keepalives (idle %ds, interval %ds, count %d) release a dead replica's slot after about %s",
		f.KeepalivesIdleS, f.KeepalivesIntervalS, f.KeepalivesCount, after)
	if after > keepaliveSlack {
		return sevWarn, found, fix
	}
	return sevOK, found, ""
}

// privilegeFacts are what the pipeline's role may do in its database.
type privilegeFacts struct {
	Role     string
	Database string
	// Catalog: outboxd_slots exists; CatalogSelect, CatalogInsert and
	// CatalogUpdate: the role holds each on it.
	Catalog                                     bool
	CatalogSelect, CatalogInsert, CatalogUpdate bool
	// Unreadable are the outbox tables (schema.name) the role may not
	// read: a backfill and a replay do.
	Unreadable []string
	// Schema is the first table's schema ("public" when none);
	// CreateOnDatabase and CreateOnSchema what migrate needs (CREATE
	// PUBLICATION, the tables).
	Schema                           string
	CreateOnDatabase, CreateOnSchema bool
}

// privilegeFindings judges the role's privileges for run and migrate.
func privilegeFindings(f privilegeFacts) []finding {
	var out []finding
	var missing []string
	for _, p := range []struct {
		name string
		held bool
	}{{"SELECT", f.CatalogSelect}, {"INSERT", f.CatalogInsert}, {"UPDATE", f.CatalogUpdate}} {
		if !p.held {
			missing = append(missing, p.name)
		}
	}
	switch {
	case f.Catalog && len(missing) > 0:
		out = append(out, finding{Check: "privileges for run", Severity: sevFail,
			Found: fmt.Sprintf("role %s lacks %s on outboxd_slots: run refuses to start, as it could not tell a lost slot or an unfinished backfill", f.Role, strings.Join(missing, ", ")),
			Fix:   "GRANT SELECT, INSERT, UPDATE ON outboxd_slots TO " + f.Role})
	case len(f.Unreadable) > 0:
		tables := strings.Join(f.Unreadable, ", ")
		out = append(out, finding{Check: "privileges for run", Severity: sevWarn,
			Found: fmt.Sprintf("role %s may not read %s: a backfill (--backfill-where) and outboxd replay read the outbox table", f.Role, tables),
			Fix:   "GRANT SELECT ON " + tables + " TO " + f.Role})
	default:
		out = append(out, finding{Check: "privileges for run", Severity: sevOK, Found: "role " + f.Role + " may read and write outboxd's catalog"})
	}
	var lacks []string
	if !f.CreateOnDatabase {
		lacks = append(lacks, "CREATE on database "+f.Database+" (CREATE PUBLICATION)")
	}
	if !f.CreateOnSchema {
		lacks = append(lacks, "CREATE on schema "+f.Schema+" (outboxd's tables)")
	}
	if len(lacks) > 0 {
		out = append(out, finding{Check: "privileges for migrate", Severity: sevWarn,
			Found: fmt.Sprintf("role %s lacks %s: outboxd migrate as this role would fail", f.Role, strings.Join(lacks, " and ")),
			Fix:   "run migrate as the database's or schema's owner, or give migrate --print-sql's SQL to whoever is"})
	} else {
		out = append(out, finding{Check: "privileges for migrate", Severity: sevOK, Found: "role " + f.Role + " may create what migrate creates"})
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// neededTopic is a topic a pipeline writes that is known ahead.
type neededTopic struct {
	Name, Why string
	// Created: outboxd creates it at start when missing (the progress
	// topic).
	Created bool
}

// kafkaNeed is what a pipeline needs of its Kafka cluster.
type kafkaNeed struct {
	Topics      []neededTopic
	ExactlyOnce bool
	TxnTimeout  time.Duration // --transaction-timeout
	// Principal is who the pipeline connects as, for the ACL fixes:
	// User:<SASL user>, or "" when not known here (TLS client
	// certificates, no authentication).
	Principal string
}

// aclFix is the command that lets the pipeline's principal write topic.
func (n kafkaNeed) aclFix(topic string) string {
	who := n.Principal
	if who == "" {
		who = "User:<outboxd's principal>"
	}
	return "kafka-acls.sh --add --allow-principal " + who + " --operation Write --operation Describe --topic " + topic
}

// kafkaFindings judges a cluster (as publish.Inspect read it, or the
// error reaching it) for a pipeline: every finding, ok ones too.
func kafkaFindings(f publish.ClusterFacts, err error, need kafkaNeed) []finding {
	var out []finding
	add := func(check string, sev severity, found, fix string) {
		out = append(out, finding{Check: check, Severity: sev, Found: found, Fix: fix})
	}
	if err != nil {
		add("kafka", sevFail, err.Error(), "check --brokers and the --kafka-tls and --kafka-sasl settings: doctor uses the client run would")
		return out
	}
	add("kafka", sevOK, plural(f.Brokers, "broker")+" reached", "")
	for _, t := range need.Topics {
		check := "topic " + t.Name
		tf := f.Topics[t.Name]
		switch {
		case tf.Denied:
			add(check, sevFail, t.Why+": the broker refuses to describe it to this client (TOPIC_AUTHORIZATION_FAILED): run could not write to it", need.aclFix(t.Name))
		case tf.Exists && tf.ACLKnown && (!tf.CanWrite || !tf.CanDescribe):
			add(check, sevFail, t.Why+": the broker's ACLs do not let this client "+missingOps(tf)+" it", need.aclFix(t.Name))
		case !tf.Exists && t.Created:
			add(check, sevOK, t.Why+": does not exist yet; outboxd creates it at start", "")
		case !tf.Exists:
			add(check, sevFail, t.Why+": does not exist", "create it (kafka-topics.sh --create --topic "+t.Name+" --replication-factor 3), or let outboxd's records create it with --allow-auto-topic-creation where the broker allows it")
		case tf.RF == 1:
			add(check, sevWarn, fmt.Sprintf("%s: replication factor 1: a broker lost loses its records, even acknowledged ones", t.Why), "recreate it with 3 replicas (min.insync.replicas 2)")
		case tf.MinISR == 1:
			add(check, sevWarn, fmt.Sprintf("%s: min.insync.replicas 1: acks=all is acknowledged by one replica, which may be lost before the others have the record", t.Why), "kafka-configs.sh --alter --entity-type topics --entity-name "+t.Name+" --add-config min.insync.replicas=2")
		default:
			found := fmt.Sprintf("%s: %d partitions, replication factor %d, min.insync.replicas %d", t.Why, tf.Partitions, tf.RF, tf.MinISR)
			if tf.ACLKnown {
				found += "; this client may write to it"
			}
			add(check, sevOK, found, "")
		}
	}
	if !need.ExactlyOnce {
		return out
	}
	switch {
	case f.TxnMaxTimeout > 0 && f.TxnMaxTimeout < need.TxnTimeout:
		add("transaction timeout", sevFail, fmt.Sprintf("--transaction-timeout %s is above the brokers' transaction.max.timeout.ms (%s): Kafka refuses the producer", need.TxnTimeout, f.TxnMaxTimeout),
			"lower --transaction-timeout, or raise transaction.max.timeout.ms")
	case f.TxnMaxTimeout > 0:
		add("transaction timeout", sevOK, fmt.Sprintf("--transaction-timeout %s within transaction.max.timeout.ms %s", need.TxnTimeout, f.TxnMaxTimeout), "")
	}
	switch {
	case f.TxnStateRF == 1:
		add("transaction state log", sevWarn, "transaction.state.log.replication.factor 1: a broker lost loses the transactions' state", "3 in production (set before the log is created)")
	case f.TxnStateMinISR == 1:
		add("transaction state log", sevWarn, "transaction.state.log.min.isr 1: a transaction's state may live on one replica", "2 in production")
	case f.TxnStateRF > 0:
		add("transaction state log", sevOK, fmt.Sprintf("replication factor %d, min.isr %d", f.TxnStateRF, f.TxnStateMinISR), "")
	}
	return out
}

// missingOps names what a topic's ACLs keep the client from.
func missingOps(tf publish.TopicFacts) string {
	switch {
	case !tf.CanWrite && !tf.CanDescribe:
		return "write to or describe"
	case !tf.CanWrite:
		return "write to"
	}
	return "describe"
}

// registryFindings judges the schema registry for a pipeline with a
// schema format (registry.Check's result, or the error reaching it).
func registryFindings(res registry.CheckResult, err error) []finding {
	if err != nil {
		return []finding{{Check: "schema registry", Severity: sevFail, Found: err.Error(),
			Fix: "check --schema-registry-url and its credentials and TLS files: doctor uses the client run would"}}
	}
	out := []finding{{Check: "schema registry", Severity: sevOK, Found: "reached"}}
	if res.AutoRegister {
		out[0].Found += "; schemas are registered at first use (--auto-register-schemas): no subject needs to exist ahead"
	}
	for _, c := range res.Subjects {
		f := finding{Check: c.String(), Severity: sevOK, Found: fmt.Sprintf("schema id %d, version %d", c.SchemaID, c.Version)}
		if c.Err != nil {
			f.Severity, f.Found = sevFail, c.Err.Error()
			var missing *registry.SubjectMissingError
			if errors.As(c.Err, &missing) {
				f.Fix = "register the " + c.Side + " schema under " + c.Subject + " before the first row, or run with --auto-register-schemas"
			}
		}
		out = append(out, f)
	}
	if res.PerTopic {
		out = append(out, finding{Check: "subjects per topic", Severity: sevOK,
			Found: "named after each row's topic (--subject-name-strategy): those of topics not known ahead are asked for as rows come, and a row whose subject does not exist is refused (dead-lettered with --dead-letter-topic)"})
	}
	return out
}
