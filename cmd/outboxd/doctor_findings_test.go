package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/publish"
	"github.com/outboxd/outboxd/registry"
)

// Issue 53: doctor's judgement of a server, one finding a setting.
func TestServerFindings(t *testing.T) {
	t.Parallel()
	good := serverFacts{Version: 170000, WALLevel: "logical", MaxSlots: 10, MaxWALSenders: 10, Slots: 2, WALSenders: 1,
		MaxSlotWALKeepMB: 102400, WALSenderTimeoutMS: 60000, Replication: true, Role: "outboxd"}
	one := []pipelineNeed{{Name: "orders"}}
	tests := []struct {
		name      string
		facts     func(*serverFacts)
		pipelines []pipelineNeed
		check     string
		want      severity
		says      string // in Found or Fix
	}{
		{name: "a good server", check: "wal_level", want: sevOK},
		{name: "wal_level replica", facts: func(f *serverFacts) { f.WALLevel = "replica" }, check: "wal_level", want: sevFail, says: "ALTER SYSTEM SET wal_level = logical"},
		{name: "slots to spare", check: "max_replication_slots", want: sevOK, says: "2 of max_replication_slots 10 in use, 1 more needed by 1 pipeline"},
		{name: "too few slots for a fleet", facts: func(f *serverFacts) { f.MaxSlots, f.Slots = 4, 2 },
			pipelines: []pipelineNeed{{Name: "a"}, {Name: "b"}, {Name: "c", SlotExists: true}, {Name: "d"}},
			check:     "max_replication_slots", want: sevFail, says: "at least 5"},
		{name: "no slot to spare", facts: func(f *serverFacts) { f.MaxSlots, f.Slots = 3, 2 }, check: "max_replication_slots", want: sevWarn, says: "none to spare"},
		{name: "too few walsenders", facts: func(f *serverFacts) { f.MaxWALSenders, f.WALSenders = 2, 2 }, check: "max_wal_senders", want: sevFail, says: "at least 3"},
		{name: "a streaming pipeline holds its walsender", facts: func(f *serverFacts) { f.MaxWALSenders, f.WALSenders = 2, 2 },
			pipelines: []pipelineNeed{{Name: "orders", SlotExists: true, Streaming: true}}, check: "max_wal_senders", want: sevOK},
		{name: "unlimited WAL for a slot", facts: func(f *serverFacts) { f.MaxSlotWALKeepMB = -1 }, check: "max_slot_wal_keep_size", want: sevWarn, says: "until the disk is full"},
		{name: "no walsender timeout", facts: func(f *serverFacts) { f.WALSenderTimeoutMS = 0 }, check: "wal_sender_timeout", want: sevWarn, says: "no other replica can take it"},
		{name: "idle slots invalidated (18)", facts: func(f *serverFacts) { f.Version, f.IdleSlotTimeoutS = 180000, 3600 }, check: "idle_replication_slot_timeout", want: sevWarn, says: "3600s"},
		{name: "keepalives not relied on", check: "tcp keepalives", want: sevOK, says: "not relied on"},
		{name: "keepalives at the OS defaults, no walsender timeout", facts: func(f *serverFacts) { f.WALSenderTimeoutMS = 0 }, check: "tcp keepalives", want: sevWarn, says: "2 hours"},
		{name: "slow keepalives, no walsender timeout", facts: func(f *serverFacts) {
			f.WALSenderTimeoutMS, f.KeepalivesIdleS, f.KeepalivesIntervalS, f.KeepalivesCount = 0, 600, 60, 9
		}, check: "tcp keepalives", want: sevWarn, says: "after about 19m0s"},
		{name: "quick keepalives, no walsender timeout", facts: func(f *serverFacts) {
			f.WALSenderTimeoutMS, f.KeepalivesIdleS, f.KeepalivesIntervalS, f.KeepalivesCount = 0, 60, 10, 3
		}, check: "tcp keepalives", want: sevOK, says: "after about 1m30s"},
		{name: "a role that may not replicate", facts: func(f *serverFacts) { f.Replication = false }, check: "replication privilege", want: sevFail, says: "ALTER ROLE outboxd REPLICATION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := good
			if tt.facts != nil {
				tt.facts(&f)
			}
			pipelines := tt.pipelines
			if pipelines == nil {
				pipelines = one
			}
			wantFinding(t, serverFindings(f, pipelines), tt.check, tt.want, tt.says)
		})
	}
	// A good server has no warning or failure.
	for _, x := range serverFindings(good, one) {
		if x.Severity != sevOK {
			t.Errorf("a good server: %+v", x)
		}
	}
}

// Issue 53: doctor's judgement of a Kafka cluster for a pipeline.
func TestKafkaFindings(t *testing.T) {
	t.Parallel()
	healthy := publish.TopicFacts{Exists: true, Partitions: 6, RF: 3, MinISR: 2}
	facts := func(topics map[string]publish.TopicFacts) publish.ClusterFacts {
		return publish.ClusterFacts{Brokers: 3, Topics: topics, TxnStateRF: 3, TxnStateMinISR: 2, TxnMaxTimeout: 15 * time.Minute}
	}
	dlq := neededTopic{Name: "dlq", Why: "the dead-letter topic"}
	tests := []struct {
		name  string
		facts publish.ClusterFacts
		err   error
		need  kafkaNeed
		check string
		want  severity
		says  string
	}{
		{name: "reached", facts: facts(nil), check: "kafka", want: sevOK, says: "3 brokers reached"},
		{name: "not reached", err: errors.New("reaching Kafka: dial tcp: refused"), check: "kafka", want: sevFail, says: "--brokers"},
		{name: "a healthy topic", facts: facts(map[string]publish.TopicFacts{"dlq": healthy}), need: kafkaNeed{Topics: []neededTopic{dlq}}, check: "topic dlq", want: sevOK, says: "replication factor 3"},
		{name: "a missing topic", facts: facts(map[string]publish.TopicFacts{"dlq": {}}), need: kafkaNeed{Topics: []neededTopic{dlq}}, check: "topic dlq", want: sevFail, says: "does not exist"},
		{name: "a missing topic outboxd creates", facts: facts(map[string]publish.TopicFacts{"p": {}}), need: kafkaNeed{Topics: []neededTopic{{Name: "p", Created: true}}}, check: "topic p", want: sevOK, says: "outboxd creates it"},
		{name: "one replica", facts: facts(map[string]publish.TopicFacts{"dlq": {Exists: true, RF: 1, MinISR: 1}}), need: kafkaNeed{Topics: []neededTopic{dlq}}, check: "topic dlq", want: sevWarn, says: "replication factor 1"},
		{name: "min.insync.replicas 1", facts: facts(map[string]publish.TopicFacts{"dlq": {Exists: true, RF: 3, MinISR: 1}}), need: kafkaNeed{Topics: []neededTopic{dlq}}, check: "topic dlq", want: sevWarn, says: "min.insync.replicas=2"},
		{name: "a topic the ACLs let write", facts: facts(map[string]publish.TopicFacts{"dlq": {Exists: true, RF: 3, MinISR: 2, ACLKnown: true, CanWrite: true, CanDescribe: true}}), need: kafkaNeed{Topics: []neededTopic{dlq}}, check: "topic dlq", want: sevOK, says: "may write"},
		{name: "a topic the ACLs keep from writing", facts: facts(map[string]publish.TopicFacts{"dlq": {Exists: true, RF: 3, MinISR: 2, ACLKnown: true, CanDescribe: true}}), need: kafkaNeed{Topics: []neededTopic{dlq}, Principal: "User:outboxd"}, check: "topic dlq", want: sevFail, says: "--allow-principal User:outboxd --operation Write"},
		{name: "a topic the broker will not describe", facts: facts(map[string]publish.TopicFacts{"dlq": {Denied: true}}), need: kafkaNeed{Topics: []neededTopic{dlq}}, check: "topic dlq", want: sevFail, says: "TOPIC_AUTHORIZATION_FAILED"},
		{name: "a transaction timeout Kafka refuses", facts: facts(nil), need: kafkaNeed{ExactlyOnce: true, TxnTimeout: 20 * time.Minute}, check: "transaction timeout", want: sevFail, says: "transaction.max.timeout.ms"},
		{name: "a transaction timeout Kafka takes", facts: facts(nil), need: kafkaNeed{ExactlyOnce: true, TxnTimeout: time.Minute}, check: "transaction timeout", want: sevOK},
		{name: "a transaction state log of one replica", facts: publish.ClusterFacts{Brokers: 1, TxnStateRF: 1, TxnStateMinISR: 1}, need: kafkaNeed{ExactlyOnce: true, TxnTimeout: time.Minute}, check: "transaction state log", want: sevWarn, says: "replication.factor 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantFinding(t, kafkaFindings(tt.facts, tt.err, tt.need), tt.check, tt.want, tt.says)
		})
	}
}

// wantFinding checks that findings have one of check, of severity want,
// saying says (in what it found or the fix).
func wantFinding(t *testing.T, findings []finding, check string, want severity, says string) {
	t.Helper()
	got := findingOf(findings, check)
	if got == nil {
		t.Fatalf("no %s finding in %+v", check, findings)
	}
	if got.Severity != want || !strings.Contains(got.Found+" "+got.Fix, says) {
		t.Errorf("%s: %+v, want %s saying %q", check, *got, want, says)
	}
}

// Issue 53: doctor's judgement of the role's privileges for run and migrate.
func TestPrivilegeFindings(t *testing.T) {
	t.Parallel()
	good := privilegeFacts{Role: "outboxd", Database: "app", Catalog: true, CatalogSelect: true, CatalogInsert: true, CatalogUpdate: true,
		Schema: "public", CreateOnDatabase: true, CreateOnSchema: true}
	tests := []struct {
		name  string
		facts func(*privilegeFacts)
		check string
		want  severity
		says  string
	}{
		{name: "all granted", check: "privileges for run", want: sevOK},
		{name: "migrate may", check: "privileges for migrate", want: sevOK},
		{name: "no UPDATE on the catalog", facts: func(f *privilegeFacts) { f.CatalogUpdate = false }, check: "privileges for run", want: sevFail, says: "lacks UPDATE on outboxd_slots"},
		{name: "no catalog yet", facts: func(f *privilegeFacts) { f.Catalog, f.CatalogSelect = false, false }, check: "privileges for run", want: sevOK},
		{name: "an unreadable outbox table", facts: func(f *privilegeFacts) { f.Unreadable = []string{"app.outbox"} }, check: "privileges for run", want: sevWarn, says: "GRANT SELECT ON app.outbox TO outboxd"},
		{name: "no CREATE on the database", facts: func(f *privilegeFacts) { f.CreateOnDatabase = false }, check: "privileges for migrate", want: sevWarn, says: "CREATE on database app"},
		{name: "no CREATE on the schema", facts: func(f *privilegeFacts) { f.CreateOnSchema = false }, check: "privileges for migrate", want: sevWarn, says: "CREATE on schema public"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := good
			if tt.facts != nil {
				tt.facts(&f)
			}
			wantFinding(t, privilegeFindings(f), tt.check, tt.want, tt.says)
		})
	}
}

// Issue 53: doctor's judgement of the schema registry.
func TestRegistryFindings(t *testing.T) {
	t.Parallel()
	missing := &registry.SubjectMissingError{What: `subject "orders-value"`, Message: "Subject not found"}
	tests := []struct {
		name  string
		res   registry.CheckResult
		err   error
		check string
		want  severity
		says  string
	}{
		{name: "not reached", err: errors.New("asking the schema registry for its subjects: connection refused"), check: "schema registry", want: sevFail, says: "--schema-registry-url"},
		{name: "reached", check: "schema registry", want: sevOK, says: "reached"},
		{name: "auto-registration", res: registry.CheckResult{AutoRegister: true}, check: "schema registry", want: sevOK, says: "registered at first use"},
		{name: "a subject there", res: registry.CheckResult{Subjects: []registry.SubjectCheck{{Side: "value", Subject: "orders-value", SchemaID: 7, Version: 2}}},
			check: "value subject orders-value", want: sevOK, says: "schema id 7, version 2"},
		{name: "a subject missing", res: registry.CheckResult{Subjects: []registry.SubjectCheck{{Side: "value", Subject: "orders-value", Err: missing}}},
			check: "value subject orders-value", want: sevFail, says: "--auto-register-schemas"},
		{name: "a pinned id missing", res: registry.CheckResult{Subjects: []registry.SubjectCheck{{Side: "key", Err: errors.New("the schema registry has no schema id 9")}}},
			check: "key schema id", want: sevFail, says: "schema id 9"},
		{name: "subjects per topic", res: registry.CheckResult{PerTopic: true}, check: "subjects per topic", want: sevOK, says: "as rows come"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantFinding(t, registryFindings(tt.res, tt.err), tt.check, tt.want, tt.says)
		})
	}
}
