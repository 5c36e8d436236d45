package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/bench/internal/cmdline"
)

type results struct {
	Date       string           `json:"date"`
	Debezium   string           `json:"debezium"`
	Postgres   string           `json:"postgres"`
	Kafka      string           `json:"kafka"`
	Partitions int              `json:"partitions"`
	Scenarios  []scenarioResult `json:"scenarios"`
	Handover   *handoverResult  `json:"handover,omitempty"`
}

type scenarioResult struct {
	scenario
	Records          int            `json:"records"`   // matched by id
	Differing        int            `json:"differing"` // records with any field other than the timestamp differing
	ByField          map[string]int `json:"by_field"`
	Unmatched        []string       `json:"unmatched,omitempty"` // ids only one system published
	Examples         []string       `json:"examples,omitempty"`
	TimestampDiffers int            `json:"timestamp_differs"`
	NullKeys         int            `json:"null_keys"` // records without a key: their partition is not compared
	// TimestampDeltaMs is Debezium's timestamp less outboxd's (the commit
	// time), median and maximum: Debezium's is its processing time.
	TimestampDeltaMs [2]int64 `json:"timestamp_delta_ms"`
	// Debezium is every record Debezium published, as compared.
	Debezium []recordJSON `json:"debezium_records"`
}

// recordJSON is a record's compared fields (nil bytes: null).
type recordJSON struct {
	Topic     string       `json:"topic"`
	Partition int32        `json:"partition"`
	Key       *string      `json:"key"`
	Value     *string      `json:"value"`
	Headers   [][2]*string `json:"headers"`
}

func recordOf(r *kgo.Record) recordJSON {
	str := func(b []byte) *string {
		if b == nil {
			return nil
		}
		s := string(b)
		return &s
	}
	j := recordJSON{Topic: r.Topic, Partition: r.Partition, Key: str(r.Key), Value: str(r.Value)}
	for _, h := range r.Headers {
		k := h.Key
		j.Headers = append(j.Headers, [2]*string{&k, str(h.Value)})
	}
	return j
}

// shown renders one record's fields for comparison and the report.
type shown struct {
	topic, key, value, headers string
	partition                  int32
	ts                         time.Time
}

func show(r *kgo.Record) shown {
	bytesOrNull := func(b []byte) string {
		if b == nil {
			return "null"
		}
		return strconv.Quote(string(b))
	}
	var hs []string
	for _, h := range r.Headers {
		if strings.HasPrefix(h.Key, "outboxd.") {
			// outboxd's own headers (outboxd.source, on every record):
			// Debezium has none; a consumer that does not read them sees
			// the same record.
			continue
		}
		hs = append(hs, h.Key+"="+bytesOrNull(h.Value))
	}
	return shown{topic: r.Topic, key: bytesOrNull(r.Key), value: bytesOrNull(r.Value), headers: strings.Join(hs, ", "),
		partition: r.Partition, ts: r.Timestamp}
}

func idOf(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "id" {
			return string(h.Value)
		}
	}
	return ""
}

func compare(sc scenario, dbz, obx []*kgo.Record) scenarioResult {
	res := scenarioResult{scenario: sc, ByField: map[string]int{"topic": 0, "partition": 0, "key": 0, "value": 0, "headers": 0}}
	byID := map[string]*kgo.Record{}
	for _, r := range obx {
		byID[idOf(r)] = r
	}
	var deltas []int64
	seen := map[string]bool{}
	for _, d := range dbz {
		id := idOf(d)
		seen[id] = true
		res.Debezium = append(res.Debezium, recordOf(d))
		o, ok := byID[id]
		if !ok {
			res.Unmatched = append(res.Unmatched, "only Debezium: "+id)
			continue
		}
		res.Records++
		a, b := show(d), show(o)
		var diffs []string
		check := func(field, x, y string) {
			if x != y {
				res.ByField[field]++
				diffs = append(diffs, fmt.Sprintf("%s: Debezium %s, outboxd %s", field, x, y))
			}
		}
		check("topic", strconv.Quote(a.topic), strconv.Quote(b.topic))
		if d.Key == nil && o.Key == nil {
			// No key, no partitioning contract: each producer's sticky
			// partitioner picks one.
			res.NullKeys++
		} else {
			check("partition", strconv.Itoa(int(a.partition)), strconv.Itoa(int(b.partition)))
		}
		check("key", a.key, b.key)
		check("value", a.value, b.value)
		check("headers", "["+a.headers+"]", "["+b.headers+"]")
		if len(diffs) > 0 {
			res.Differing++
			if len(res.Examples) < 10 {
				res.Examples = append(res.Examples, "id "+id+": "+strings.Join(diffs, "; "))
			}
		}
		if !a.ts.Equal(b.ts) {
			res.TimestampDiffers++
		}
		deltas = append(deltas, a.ts.Sub(b.ts).Milliseconds())
	}
	for _, o := range obx {
		if id := idOf(o); !seen[id] {
			res.Unmatched = append(res.Unmatched, "only outboxd: "+id)
		}
	}
	if len(deltas) > 0 {
		slices.Sort(deltas)
		res.TimestampDeltaMs = [2]int64{deltas[len(deltas)/2], deltas[len(deltas)-1]}
	}
	return res
}

func write(dir string, res results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# outboxd --layout debezium beside Debezium's outbox EventRouter\n\n")
	fmt.Fprintf(&b, "Generated by `make compare-debezium` (bench/cmd/debezium-compare) on %s; raw figures in results.json.\n", res.Date)
	fmt.Fprintf(&b, "Debezium %s and `outboxd run --layout debezium` read the same committed inserts\n", res.Debezium)
	fmt.Fprintf(&b, "into Debezium's outbox table (PostgreSQL %s), each from a slot of its own created\n", res.Postgres)
	fmt.Fprintf(&b, "before the inserts, one after the other into the same topics (Kafka %s, %d partitions,\n", res.Kafka, res.Partitions)
	fmt.Fprintf(&b, "re-created in between). Every record is matched by its id header and compared field by\n")
	fmt.Fprintf(&b, "field: topic, partition, key bytes, value bytes, and the headers in order with their\n")
	fmt.Fprintf(&b, "values, outboxd's own outboxd.* headers (outboxd.source) left out. The connector runs\n")
	fmt.Fprintf(&b, "with extended.headers.enabled=false (bench/debezium/README.md);\n")
	fmt.Fprintf(&b, "the timestamp is counted apart, because Debezium's is when it processed the event.\n")
	fmt.Fprintf(&b, "The partition of a record without a key is the producer's choice (a sticky\n")
	fmt.Fprintf(&b, "partitioner in both), so it is not compared for those (\"no key\" below).\n")
	fmt.Fprintf(&b, "The rows are bench/cmd/debezium-compare/corpus.go; what differs by design is in\n")
	fmt.Fprintf(&b, "README.md, \"Replacing Debezium\".\n\n")
	fmt.Fprintf(&b, "| scenario | records | differing | topic | partition | key | value | headers | only one side | no key | timestamp differs | Debezium ts − commit ts, median / max ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range res.Scenarios {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d / %d |\n", s.Name, s.Records, s.Differing,
			s.ByField["topic"], s.ByField["partition"], s.ByField["key"], s.ByField["value"], s.ByField["headers"], len(s.Unmatched),
			s.NullKeys, s.TimestampDiffers, s.TimestampDeltaMs[0], s.TimestampDeltaMs[1])
	}
	for _, s := range res.Scenarios {
		fmt.Fprintf(&b, "\n## %s\n\n%s.\n\nConnector settings beyond the template:\n\n", s.Name, s.What)
		for _, c := range s.Connector {
			fmt.Fprintf(&b, "    %s\n", c)
		}
		fmt.Fprintf(&b, "\noutboxd: `outboxd run %s`\n", cmdline.Join(s.Outboxd))
		if len(s.Examples)+len(s.Unmatched) > 0 {
			fmt.Fprintf(&b, "\nDifferences:\n\n")
			sort.Strings(s.Unmatched)
			for _, x := range append(s.Unmatched, s.Examples...) {
				fmt.Fprintf(&b, "- %s\n", x)
			}
		} else {
			fmt.Fprintf(&b, "\nNo record differs.\n")
		}
	}
	if h := res.Handover; h != nil {
		fmt.Fprintf(&b, "\n## Handover: Kafka Connect stopped, outboxd started on Debezium's slot\n\n")
		fmt.Fprintf(&b, "Debezium (defaults scenario) published %d rows; Kafka Connect was stopped with SIGTERM\n", h.Before)
		fmt.Fprintf(&b, "(it flushes its offsets and confirms the slot); %d more rows were written; then\n", h.After)
		fmt.Fprintf(&b, "`outboxd migrate` and `outboxd run --layout debezium` ran with Debezium's slot and\n")
		fmt.Fprintf(&b, "publication (`--slot`, `--publication dbz_outbox`), adopting the slot.\n\n")
		fmt.Fprintf(&b, "- rows never in Kafka: %d\n- duplicates (an id already published, sent again from the slot's confirmed position): %d\n", len(h.Missing), h.Duplicates)
		fmt.Fprintf(&b, "- duplicates whose topic, key, value, headers or (keyed) partition differ from the first copy: %d\n", h.Differing)
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}
