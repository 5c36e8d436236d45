package registry_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/registry"
)

const (
	v1 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}`
	v2 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}`
)

// sink records what the stage hands on.
type sink struct {
	applied  []outbox.Change
	rejected []*outbox.RowError
}

func (s *sink) Apply(_ context.Context, c outbox.Change) error {
	s.applied = append(s.applied, c)
	return nil
}

func (s *sink) Reject(_ context.Context, re *outbox.RowError) error {
	s.rejected = append(s.rejected, re)
	return nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start builds a stage on reg and runs its fetcher for the test.
func start(t *testing.T, reg *srfake.Registry, cfg registry.Config) (*registry.Stage, *sink) {
	t.Helper()
	if cfg.URLs == nil {
		cfg.URLs = []string{reg.URL()}
	}
	next := &sink{}
	st, err := registry.New(cfg, next, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return st, next
}

// contextWithTimeout is the test's context ending after seconds.
func contextWithTimeout(t *testing.T, seconds int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), time.Duration(seconds)*time.Second)
}

func event(pos int, value, key string) outbox.Change {
	ev := outbox.Event{Table: "public.outbox", Topic: "orders", Value: []byte(value), Key: []byte(key),
		Headers:   []outbox.Header{{Key: outbox.IDHeader, Value: []byte("42")}, {Key: outbox.SourceHeader, Value: []byte("7/app/public.outbox")}},
		CommitLSN: 100, Index: pos}
	if key == "" {
		ev.Key = nil
	}
	return outbox.Change{Kind: outbox.ChangeEvent, Event: ev}
}

// decoded is the schema id and JSON of a record's bytes, by the codec of
// the schema with that id in reg.
func decoded(t *testing.T, reg *srfake.Registry, f string, b []byte) (int, string) {
	t.Helper()
	id, body, err := format.ID(b)
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := sr.NewClient(sr.URLs(reg.URL()))
	s, err := cl.SchemaByID(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := format.New(format.Schema{Format: f, Text: s.Schema})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	return id, string(out)
}

func TestEncodesValueAndKeyUnderTheTopicsSubjects(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	vid, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: v1})
	kid, _, _ := reg.RegisterSchema("orders-key", sr.Schema{Schema: `"string"`})
	st, next := start(t, reg, registry.Config{Value: registry.Side{Format: format.Avro}, Key: registry.Side{Format: format.Avro}})
	ctx := t.Context()
	steps := []outbox.Change{{Kind: outbox.ChangeBegin}, event(0, `{"id":5}`, "agg-1"), event(1, ``, ""), {Kind: outbox.ChangeCommit}}
	steps[2].Event.Value = nil // a tombstone stays one
	for _, c := range steps {
		if err := st.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if len(next.applied) != 4 || len(next.rejected) != 0 {
		t.Fatalf("handed on %d changes and %d rejects, want 4 and 0", len(next.applied), len(next.rejected))
	}
	ev := next.applied[1].Event
	if id, v := decoded(t, reg, format.Avro, ev.Value); id != vid || v != `{"id":5}` {
		t.Errorf("value = id %d %s, want id %d {\"id\":5}", id, v, vid)
	}
	if id, k := decoded(t, reg, format.Avro, ev.Key); id != kid || k != "agg-1" {
		t.Errorf("key = id %d %s, want id %d agg-1", id, k, kid)
	}
	if tomb := next.applied[2].Event; tomb.Value != nil || tomb.Key != nil {
		t.Errorf("tombstone became value %q key %q", tomb.Value, tomb.Key)
	}
	if got := st.Stats(); got.Encoded != 2 || got.Refused != 0 {
		t.Errorf("Stats = %+v", got)
	}
}

func TestSubjectNameStrategies(t *testing.T) {
	cases := []struct {
		strategy, subject string
	}{
		{registry.TopicName, "orders-value"},
		{registry.RecordName, "shop.Order"},
		{registry.TopicRecordName, "orders-shop.Order"},
	}
	for _, tc := range cases {
		t.Run(tc.strategy, func(t *testing.T) {
			reg := srfake.New()
			defer reg.Close()
			id, _, _ := reg.RegisterSchema(tc.subject, sr.Schema{Schema: `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"}]}`})
			st, next := start(t, reg, registry.Config{SubjectStrategy: tc.strategy, Value: registry.Side{Format: format.Avro, Record: "shop.Order"}})
			if err := st.Apply(t.Context(), event(0, `{"id":1}`, "")); err != nil {
				t.Fatal(err)
			}
			if got, _ := decoded(t, reg, format.Avro, next.applied[0].Event.Value); got != id {
				t.Errorf("schema id %d, want %d of subject %s", got, id, tc.subject)
			}
		})
	}
}

func TestAPayloadThatDoesNotFitIsRejectedRawNamingTheSchema(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: v1})
	st, next := start(t, reg, registry.Config{Value: registry.Side{Format: format.Avro}})
	bad := event(3, `{"id":"five"}`, "agg")
	if err := st.Apply(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	if len(next.applied) != 0 || len(next.rejected) != 1 {
		t.Fatalf("handed on %d, rejected %d; want the record rejected", len(next.applied), len(next.rejected))
	}
	re := next.rejected[0]
	for _, want := range []string{`subject "orders-value"`, "version 1", "id " + strconv.Itoa(id), "$.id: want an integer", "outbox id 42"} {
		if !strings.Contains(re.Error(), want) {
			t.Errorf("error %q lacks %q", re.Error(), want)
		}
	}
	if string(re.Value) != `{"id":"five"}` || string(re.Key) != "agg" || re.Topic != "orders" || re.Index != 3 || re.CommitLSN != 100 || re.Source != "7/app/public.outbox" {
		t.Errorf("rejected %+v, want the raw record in its place", re)
	}
	if st.Stats().Refused != 1 {
		t.Errorf("Stats = %+v", st.Stats())
	}
}

func TestANewVersionIsTakenUpBeforeAPayloadIsRefused(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id1, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: v1})
	st, next := start(t, reg, registry.Config{Value: registry.Side{Format: format.Avro}})
	ctx := t.Context()
	if err := st.Apply(ctx, event(0, `{"id":1}`, "")); err != nil {
		t.Fatal(err)
	}
	id2, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: v2})
	if err != nil {
		t.Fatal(err)
	}
	// Still fits the cached v1: v1 stays in use until the refresh.
	if err := st.Apply(ctx, event(1, `{"id":2}`, "")); err != nil {
		t.Fatal(err)
	}
	if err := st.Apply(ctx, event(2, `{"id":3,"note":"new"}`, "")); err != nil {
		t.Fatal(err)
	}
	if len(next.rejected) != 0 {
		t.Fatalf("rejected %v", next.rejected[0])
	}
	for i, want := range []int{id1, id1, id2} {
		if got, _ := decoded(t, reg, format.Avro, next.applied[i].Event.Value); got != want {
			t.Errorf("record %d under schema id %d, want %d", i, got, want)
		}
	}
	if _, v := decoded(t, reg, format.Avro, next.applied[2].Event.Value); v != `{"id":3,"note":"new"}` {
		t.Errorf("record 2 = %s", v)
	}
}

func TestTheLatestSchemaIsLookedUpAgainEveryRefreshInterval(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	reg.RegisterSchema("orders-value", sr.Schema{Schema: v1})
	st, next := start(t, reg, registry.Config{Value: registry.Side{Format: format.Avro}, RefreshInterval: 50 * time.Millisecond})
	ctx := t.Context()
	if err := st.Apply(ctx, event(0, `{"id":1}`, "")); err != nil {
		t.Fatal(err)
	}
	id2, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: v2})
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; ; i++ {
		if err := st.Apply(ctx, event(i, `{"id":1}`, "")); err != nil {
			t.Fatal(err)
		}
		if id, _ := decoded(t, reg, format.Avro, next.applied[i].Event.Value); id == id2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the new latest version was never taken up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPinnedVersionAndID(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id1, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: v1})
	reg.RegisterSchema("orders-value", sr.Schema{Schema: v2})
	other, _, _ := reg.RegisterSchema("elsewhere", sr.Schema{Schema: `{"type":"record","name":"X","fields":[{"name":"id","type":"long"}]}`})
	for _, tc := range []struct {
		name string
		side registry.Side
		want int
	}{
		{"version", registry.Side{Format: format.Avro, Version: 1}, id1},
		{"id", registry.Side{Format: format.Avro, ID: other}, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, next := start(t, reg, registry.Config{Value: tc.side})
			// Fits the latest version but not the pinned one: refused, not
			// encoded with the latest.
			if err := st.Apply(t.Context(), event(0, `{"id":1,"note":"x"}`, "")); err != nil {
				t.Fatal(err)
			}
			if len(next.rejected) != 1 {
				t.Fatalf("rejected %d, want 1", len(next.rejected))
			}
			if err := st.Apply(t.Context(), event(1, `{"id":1}`, "")); err != nil {
				t.Fatal(err)
			}
			if got, _ := decoded(t, reg, format.Avro, next.applied[0].Event.Value); got != tc.want {
				t.Errorf("schema id %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAutoRegistrationRegistersTheGivenSchema(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	st, next := start(t, reg, registry.Config{AutoRegister: true,
		Value: registry.Side{Format: format.JSONSchema, Schema: `{"type":"object","required":["id"]}`},
		Key:   registry.Side{Format: format.Avro, Schema: `"string"`}})
	if err := st.Apply(t.Context(), event(0, `{"id":1}`, "agg")); err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"orders-value", "orders-key"} {
		if !reg.SubjectExists(subject) {
			t.Errorf("subject %s not registered", subject)
		}
	}
	if _, v := decoded(t, reg, format.JSONSchema, next.applied[0].Event.Value); v != `{"id":1}` {
		t.Errorf("value = %s", v)
	}
}

func TestARegistryThatDoesNotAnswerDelaysTheRecord(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	reg.RegisterSchema("orders-value", sr.Schema{Schema: v1})
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	st, next := start(t, reg, registry.Config{Value: registry.Side{Format: format.Avro}})
	c := event(0, `{"id":1}`, "")
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		err := st.Apply(ctx, c)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Apply while the registry is down = %v, want the context's error", err)
		}
		if len(next.applied)+len(next.rejected) != 0 {
			t.Fatal("a record went on while its schema could not be fetched")
		}
	}
	reg.ClearInterceptors()
	if err := st.Apply(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if len(next.applied) != 1 {
		t.Fatalf("handed on %d once the registry answers, want 1", len(next.applied))
	}
}

func TestAnswersRetryingCannotChangeStopThePipeline(t *testing.T) {
	cases := []struct {
		name  string
		opts  []srfake.Option
		cfg   registry.Config
		seed  func(*srfake.Registry)
		wants []string
	}{
		// The record strategy's subject does not follow from the row: the
		// configuration is wrong, not the row (the topic strategies:
		// TestAnUnknownSubjectRefusesTheRecord).
		{"no subject under the record strategy", nil, registry.Config{SubjectStrategy: registry.RecordName, Value: registry.Side{Format: format.Avro, Record: "shop.Order"}}, nil,
			[]string{`has no subject "shop.Order"`, "register the schema"}},
		{"wrong format", nil, registry.Config{Value: registry.Side{Format: format.Protobuf}},
			func(r *srfake.Registry) { r.RegisterSchema("orders-value", sr.Schema{Schema: v1}) },
			[]string{"holds a AVRO schema, not protobuf"}},
		{"credentials refused", []srfake.Option{srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("u:right")))},
			registry.Config{Value: registry.Side{Format: format.Avro}, Username: "u", Password: "s3cr3t-wrong"}, nil,
			[]string{"refused the credentials", "HTTP 403"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := srfake.New(tc.opts...)
			defer reg.Close()
			if tc.seed != nil {
				tc.seed(reg)
			}
			st, next := start(t, reg, tc.cfg)
			err := st.Apply(t.Context(), event(0, `{"id":1}`, ""))
			if err == nil {
				t.Fatal("Apply = nil")
			}
			for _, want := range tc.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error %q shows the password", err)
			}
			if len(next.applied)+len(next.rejected) != 0 {
				t.Error("a record went on")
			}
		})
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	err := registry.Config{URLs: []string{"ftp://x", "http://u:pw@h"}, Password: "p", SubjectStrategy: "name",
		Value: registry.Side{Format: "xml"}, Key: registry.Side{Format: format.JSON, Version: 2}}.Validate()
	if err == nil {
		t.Fatal("Validate = nil")
	}
	for _, want := range []string{"URLs: not an http or https URL: ftp://x", "URLs: has credentials", "Username: required", "SubjectStrategy", `Value.Format: "xml"`, "Key.Format: json has no schema"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v\nlacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "pw") {
		t.Errorf("Validate shows a URL's password: %v", err)
	}
	for _, c := range []registry.Config{
		{Value: registry.Side{Format: format.Avro}}, // no URL
		{URLs: []string{"http://r"}, SubjectStrategy: registry.RecordName, Value: registry.Side{Format: format.Avro}}, // no record name
		{URLs: []string{"http://r"}, AutoRegister: true, Value: registry.Side{Format: format.Avro}},                   // nothing to register
		{URLs: []string{"http://r"}, Value: registry.Side{Format: format.Avro, Version: 1, ID: 2}},                    // both pinned
	} {
		if c.Validate() == nil {
			t.Errorf("Validate(%+v) = nil", c)
		}
	}
}

// Regression (a review of issue 41's stage): a misfit's refetch was
// noted only once it succeeded, so a registry slower than the reader's
// wake-up (the record offered again after 100 ms) was asked again on
// every offer, and the record never refused.
func TestAMisfitAsksOnceWhileTheRegistryIsSlow(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	reg.RegisterSchema("orders-value", sr.Schema{Schema: v1})
	st, next := start(t, reg, registry.Config{Value: registry.Side{Format: format.Avro}})
	if err := st.Apply(t.Context(), event(0, `{"id":1}`, "")); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	reg.Intercept(func(http.ResponseWriter, *http.Request) bool {
		asked.Add(1)
		time.Sleep(300 * time.Millisecond)
		return false
	})
	bad := event(1, `{"id":"x"}`, "")
	deadline := time.Now().Add(10 * time.Second)
	for len(next.rejected) == 0 {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		err := st.Apply(ctx, bad)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record was never refused; the registry was asked %d times", asked.Load())
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the registry was asked %d times for one record, want 1", n)
	}
}

// TestAnUnknownSubjectRefusesTheRecord is issue 49, item 6: a row whose
// topic names no subject the registry knows (a new or mistyped type in
// the topic template) stopped its pipeline, at every restart, even with a
// dead-letter topic. Under the topic strategies that subject follows from
// the row: the record is refused as a row error, raw, naming the topic and
// the subject (the pump dead-letters it, or stops without a dead-letter
// topic, as for any row). The registry is asked again only a refresh
// interval later, and a subject registered meanwhile is then taken up.
func TestAnUnknownSubjectRefusesTheRecord(t *testing.T) {
	for _, strategy := range []string{registry.TopicName, registry.TopicRecordName} {
		t.Run(strategy, func(t *testing.T) {
			reg := srfake.New()
			defer reg.Close()
			var asked atomic.Int32
			reg.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
				if strings.Contains(r.URL.Path, "/subjects/") {
					asked.Add(1)
				}
				return false
			})
			cfg := registry.Config{SubjectStrategy: strategy, RefreshInterval: 300 * time.Millisecond, Value: registry.Side{Format: format.Avro, Record: "shop.Order"}}
			st, next := start(t, reg, cfg)
			subject := "orders-value"
			if strategy == registry.TopicRecordName {
				subject = "orders-shop.Order"
			}
			for i := range 3 {
				if err := st.Apply(t.Context(), event(i, `{"id":1}`, "")); err != nil {
					t.Fatalf("Apply of record %d = %v, want it refused as a row error", i, err)
				}
			}
			if len(next.rejected) != 3 || len(next.applied) != 0 {
				t.Fatalf("handed on %d records and refused %d, want 3 refused", len(next.applied), len(next.rejected))
			}
			re := next.rejected[0]
			if msg := re.Error(); !strings.Contains(msg, `topic "orders"`) || !strings.Contains(msg, subject) || !strings.Contains(msg, "(outbox id 42)") {
				t.Errorf("row error %q, want it to name the topic, the subject %s and the outbox id", msg, subject)
			}
			if string(re.Value) != `{"id":1}` || re.Topic != "orders" || re.Source == "" {
				t.Errorf("row error carries value %q, topic %q, source %q: want the raw record", re.Value, re.Topic, re.Source)
			}
			if n := asked.Load(); n != 1 {
				t.Errorf("the registry was asked %d times for 3 records of the unknown subject, want once", n)
			}
			if _, _, err := reg.RegisterSchema(subject, sr.Schema{Schema: v1}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(400 * time.Millisecond)
			if err := st.Apply(t.Context(), event(3, `{"id":1}`, "")); err != nil {
				t.Fatal(err)
			}
			if len(next.applied) != 1 {
				t.Errorf("after the subject was registered and the refresh interval passed, %d records handed on, want 1", len(next.applied))
			}
		})
	}
}

// Regression (issue 49, item 11): the registry's answers were read without
// a bound, so a misbehaving server (or a proxy in front of it) could make
// a pipeline read without end. An answer past 16 MiB fails, as a registry
// that does not answer properly, naming the bound.
func TestAnOversizeAnswerIsRefused(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	var big atomic.Bool
	big.Store(true)
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !big.Load() {
			return false
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = io.WriteString(w, `{"subject":"orders-value","version":1,"id":1,"schema":"`)
		chunk := strings.Repeat("x", 1<<20)
		for range 17 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return true
			}
		}
		_, _ = io.WriteString(w, `"}`)
		return true
	})
	logs := &strings.Builder{}
	var mu sync.Mutex
	st, err := registry.New(registry.Config{URLs: []string{reg.URL()}, Value: registry.Side{Format: format.Avro}}, &sink{},
		slog.New(slog.NewTextHandler(lockedWriter{&mu, logs}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go st.Run(ctx) //nolint:errcheck // it returns nil when ctx ends
	actx, acancel := contextWithTimeout(t, 3)
	defer acancel()
	if err := st.Apply(actx, event(0, `{"id":1}`, "")); err == nil {
		t.Fatal("Apply = nil with an answer of 17 MiB")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "larger than 16777216 bytes") {
		t.Errorf("the log does not say the answer was too large:\n%s", logs.String())
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
