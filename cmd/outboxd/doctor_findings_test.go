package main

import (
	"strings"
	"testing"
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
			var got *finding
			for _, x := range serverFindings(f, pipelines) {
				if x.Check == tt.check {
					got = &x
				}
			}
			if got == nil {
				t.Fatalf("no %s finding", tt.check)
			}
			if got.Severity != tt.want || !strings.Contains(got.Found+" "+got.Fix, tt.says) {
				t.Errorf("%s: %+v, want %s saying %q", tt.check, *got, tt.want, tt.says)
			}
		})
	}
	// A good server has no warning or failure.
	for _, x := range serverFindings(good, one) {
		if x.Severity != sevOK {
			t.Errorf("a good server: %+v", x)
		}
	}
}
