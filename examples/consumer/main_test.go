package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func rec(topic, key, id, payload string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(payload)}
	if id != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "type", Value: []byte("OrderCreated")}, kgo.RecordHeader{Key: "id", Value: []byte(id)})
	}
	return r
}

func TestDeduperHandle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		records []*kgo.Record
		want    []string
	}{
		{
			name:    "one record",
			records: []*kgo.Record{rec("orders.created", "k1", "1", `{"order": 1}`)},
			want:    []string{`topic=orders.created key=k1 id=1 payload={"order": 1}`},
		},
		{
			name: "redelivery skipped, later ids processed",
			records: []*kgo.Record{
				rec("orders.created", "k1", "1", `{"order": 1}`),
				rec("orders.created", "k2", "2", `{"order": 2}`),
				rec("orders.created", "k1", "1", `{"order": 1}`),
				rec("orders.created", "k3", "3", `{"order": 3}`),
			},
			want: []string{
				`topic=orders.created key=k1 id=1 payload={"order": 1}`,
				`topic=orders.created key=k2 id=2 payload={"order": 2}`,
				`duplicate id=1 skipped`,
				`topic=orders.created key=k3 id=3 payload={"order": 3}`,
			},
		},
		{
			name: "same id on another topic is still a duplicate (outbox ids are unique per table)",
			records: []*kgo.Record{
				rec("orders.created", "k1", "7", `{}`),
				rec("orders.paid", "k1", "7", `{}`),
			},
			want: []string{`topic=orders.created key=k1 id=7 payload={}`, `duplicate id=7 skipped`},
		},
		{
			name: "no id header: always processed",
			records: []*kgo.Record{
				rec("t", "k", "", `x`),
				rec("t", "k", "", `x`),
			},
			want: []string{`topic=t key=k id= payload=x`, `topic=t key=k id= payload=x`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDeduper()
			var got []string
			for _, r := range tc.records {
				got = append(got, d.handle(r))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestSplitList(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"":                           nil,
		"kafka:9092":                 {"kafka:9092"},
		" a:1 , b:2,,":               {"a:1", "b:2"},
		"orders.created,orders.paid": {"orders.created", "orders.paid"},
	} {
		if got := splitList(in); !slices.Equal(got, want) {
			t.Errorf("splitList(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMissingConfigurationIsUsageError(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	env := map[string]string{"CONSUMER_BROKERS": "kafka:9092"}
	if code := run(func(k string) string { return env[k] }, io.Discard, &stderr); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "CONSUMER_TOPICS") {
		t.Errorf("stderr does not name CONSUMER_TOPICS: %s", stderr.String())
	}
}
