package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	r := &kgo.Record{Topic: "orders.created", Key: []byte("k1"), Value: []byte(`{"order": 1}`)}
	if got, want := format(r, "1"), `topic=orders.created key=k1 id=1 payload={"order": 1}`; got != want {
		t.Errorf("format = %q, want %q", got, want)
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
	for _, env := range []map[string]string{
		{"CONSUMER_BROKERS": "kafka:9092", "CONSUMER_DATABASE_URL": "postgres://db/app"},
		{"CONSUMER_BROKERS": "kafka:9092", "CONSUMER_TOPICS": "orders.created"},
	} {
		var stderr strings.Builder
		if code := run(func(k string) string { return env[k] }, io.Discard, &stderr); code != 2 {
			t.Fatalf("exit code %d, want 2", code)
		}
		for _, v := range []string{"CONSUMER_TOPICS", "CONSUMER_DATABASE_URL"} {
			if !strings.Contains(stderr.String(), v) {
				t.Errorf("stderr does not name %s: %s", v, stderr.String())
			}
		}
	}
}
