package config

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/lib/field"
)

// namedInMessages are the settings the components' messages name (the
// paths their Names are asked for, from pipeline.Config and the process's
// fleet): each must have a flag, or a user reads a Go field's path.
var namedInMessages = []string{
	"Stream.CreateSlot", "Stream.BackfillWhere", "Stream.FailoverSlot", "Stream.Slot", "Stream.Table", "Stream.Publication",
	"Stream.DatabaseURL", "Stream.BackfillOrderColumn", "Stream.Columns.Timestamp", "Stream.ServerTimeout", "Stream.StatusInterval",
	"Kafka.MaxRecordBytes", "Kafka.AllowAutoTopicCreation", "Kafka.TLS.Enabled", "Kafka.TLS.CAFile", "Kafka.TLS.CertFile", "Kafka.TLS.KeyFile",
	"Txn.ProgressTopic", "Txn.TransactionalID", "Txn.Timeout", "Pump.DeadLetterTopic", "Fleet.Replicas",
}

// Issue 50, item 4: components named flags in their messages, wrong for
// a pipelines file. A pipeline run from flags hears its settings as
// flags, one of a pipelines file as the file's keys.
func TestNamesAreTheFlagsOrTheFileKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "pipelines.yaml", `
brokers: [kafka-1:9092]
pipelines:
  - name: orders
    database-url: postgres://db/orders
`)
	_, procFlags := processFlags(t, nil, nil)
	f, err := LoadFile(path, procFlags, runLike, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	fromFlags := Default()
	for _, p := range namedInMessages {
		flag := fromFlags.SettingNames().Of(p)
		if !strings.HasPrefix(flag, "--") {
			t.Errorf("%s: no flag sets it: messages name it %q", p, flag)
			continue
		}
		if key := f.Pipelines[0].Config.SettingNames().Of(p); key != "`"+strings.TrimPrefix(flag, "--")+"`" {
			t.Errorf("%s: a pipelines file's pipeline hears it as %q, want its key %q", p, key, strings.TrimPrefix(flag, "--"))
		}
	}
	c := Default()
	pc, err := c.Pipeline(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := pc.Names.Set(field.Setting{Path: "Stream.FailoverSlot", Value: "on"}); got != "--failover-slot=on" {
		t.Errorf("the pipeline run's flags build names --failover-slot=on as %q", got)
	}
}
