package monitoring

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/teststorage"

	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/harness/testenv"
)

// query is one PromQL expression of the rules or the dashboard, and where
// it comes from.
type query struct{ from, expr string }

// ruleQueries are alerts.yaml's expressions, after Prometheus's own
// validation of the file (syntax, templates, durations).
func ruleQueries(t *testing.T) []query {
	t.Helper()
	groups, errs := rulefmt.ParseFile("alerts.yaml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("alerts.yaml: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	var qs []query
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("alerts.yaml: a rule of group %s is not an alert", g.Name)
			}
			for _, key := range []string{"summary", "description"} {
				if r.Annotations[key] == "" {
					t.Errorf("alerts.yaml: alert %s has no %s", r.Alert, key)
				}
			}
			qs = append(qs, query{from: "alert " + r.Alert, expr: r.Expr})
		}
	}
	if len(qs) == 0 {
		t.Fatal("alerts.yaml has no alert")
	}
	return qs
}

// grafanaVariables are what the dashboard's variables stand for when its
// queries are parsed: Grafana substitutes them before Prometheus sees them.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$pipeline", ".*", "$job", ".*", "$namespace", ".*")

// dashboardQueries are dashboard.json's panel targets.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard.json: uid %q, %d panels: want a uid and panels", d.UID, len(d.Panels))
	}
	var qs []query
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard.json: panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, query{from: "panel " + p.Title, expr: grafanaVariables.Replace(tg.Expr)})
		}
	}
	return qs
}

// selector is a metric a query selects, with its matchers and the labels
// it aggregates or joins by.
type selector struct {
	from, metric string
	matchers     []*labels.Matcher
	by           []string
}

// selectors parses q and returns what it selects.
func selectors(q query) ([]selector, error) {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q.expr)
	if err != nil {
		return nil, fmt.Errorf("%s: %q: %w", q.from, q.expr, err)
	}
	var by []string
	var sels []selector
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.AggregateExpr:
			if !n.Without {
				by = append(by, n.Grouping...)
			}
		case *parser.BinaryExpr:
			if n.VectorMatching != nil && n.VectorMatching.On {
				by = append(by, n.VectorMatching.MatchingLabels...)
			}
		case *parser.VectorSelector:
			s := selector{from: q.from}
			for _, m := range n.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					s.metric = m.Value
				} else {
					s.matchers = append(s.matchers, m)
				}
			}
			sels = append(sels, s)
		}
		return nil
	})
	for i := range sels {
		sels[i].by = by
	}
	return sels, nil
}

// scrapeLabels are the labels Prometheus adds to every scraped series, and
// the histogram's own.
var scrapeLabels = []string{"namespace", "job", "instance", "le"}

// check reports each selector that names a metric families lacks, a label
// the metric does not carry, or a label value none of its series has.
func check(families map[string]*dto.MetricFamily, sels []selector) []string {
	var problems []string
	for _, s := range sels {
		family := families[s.metric]
		if family == nil {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(s.metric, suffix); ok && families[base] != nil && families[base].GetType() == dto.MetricType_HISTOGRAM {
					family = families[base]
				}
			}
		}
		if family == nil {
			problems = append(problems, fmt.Sprintf("%s: metric %s is not exported", s.from, s.metric))
			continue
		}
		values := map[string][]string{}
		for _, m := range family.GetMetric() {
			for _, l := range m.GetLabel() {
				values[l.GetName()] = append(values[l.GetName()], l.GetValue())
			}
		}
		for _, name := range s.by {
			if _, ok := values[name]; !ok && !slices.Contains(scrapeLabels, name) {
				problems = append(problems, fmt.Sprintf("%s: %s has no label %s", s.from, s.metric, name))
			}
		}
		for _, m := range s.matchers {
			if slices.Contains(scrapeLabels, m.Name) {
				continue
			}
			vs, ok := values[m.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %s has no label %s", s.from, s.metric, m.Name))
				continue
			}
			if !slices.ContainsFunc(vs, m.Matches) {
				problems = append(problems, fmt.Sprintf("%s: no series of %s has %s (its values: %v)", s.from, s.metric, m, slices.Compact(slices.Sorted(slices.Values(vs)))))
			}
		}
	}
	return problems
}

// Every alert and panel query parses, and the checker finds a metric, a
// label or a value that is not exported.
func TestQueriesParseAndTheCheckCatchesWhatIsNotExported(t *testing.T) {
	for _, q := range append(ruleQueries(t), dashboardQueries(t)...) {
		if _, err := selectors(q); err != nil {
			t.Error(err)
		}
	}
	families := map[string]*dto.MetricFamily{
		"outboxd_state": {Name: ptr("outboxd_state"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{
			{Label: []*dto.LabelPair{{Name: ptr("pipeline"), Value: ptr("orders")}, {Name: ptr("state"), Value: ptr("streaming")}}},
		}},
		"outboxd_commit_to_ack_seconds": {Name: ptr("outboxd_commit_to_ack_seconds"), Type: dto.MetricType_HISTOGRAM.Enum(), Metric: []*dto.Metric{
			{Label: []*dto.LabelPair{{Name: ptr("pipeline"), Value: ptr("orders")}}},
		}},
	}
	for _, c := range []struct {
		expr, want string
	}{
		{`max by (pipeline) (outboxd_state{state="streaming"})`, ""},
		{`histogram_quantile(0.99, sum by (pipeline, le) (rate(outboxd_commit_to_ack_seconds_bucket[5m])))`, ""},
		{`outboxd_stat`, "metric outboxd_stat is not exported"},
		{`max by (slot) (outboxd_state)`, "has no label slot"},
		{`outboxd_state{state="stoped"}`, `no series of outboxd_state has state="stoped"`},
		{`outboxd_state{pipelin="orders"}`, "has no label pipelin"},
	} {
		sels, err := selectors(query{from: "test", expr: c.expr})
		if err != nil {
			t.Fatal(err)
		}
		problems := strings.Join(check(families, sels), "; ")
		if (c.want == "") != (problems == "") || !strings.Contains(problems, c.want) {
			t.Errorf("check(%s) = %q, want %q", c.expr, problems, c.want)
		}
	}
}

func ptr(s string) *string { return &s }

// Every metric, label and label value the alerts and the dashboard select
// is exported by a running `outboxd run --config` whose pipeline has
// published a row and dead-lettered one (outboxd_dead_lettered_total and
// the per-topic series appear only then). Beside it, a pipeline stopped
// by a poison row (issue 49, item 1): the process stays ready, and the
// alerts see that pipeline, and it alone.
func TestEveryQueriedMetricIsExported(t *testing.T) {
	bin, remove, err := testbed.BuildOutboxd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	ctx := t.Context()
	db := testenv.Database(t)
	brokers := strings.Join(testenv.Brokers(t), ",")
	topic, dlt := testenv.Topic(t, 1), testenv.Topic(t, 1)
	slot := testenv.Name(t, "slot")
	if out, err := exec.CommandContext(ctx, bin, "migrate", "--database-url", db, "--slot", slot).CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	file := filepath.Join(t.TempDir(), "pipelines.yaml")
	poisonedDB, poisonedSlot := testenv.Database(t), testenv.Name(t, "poisoned")
	if out, err := exec.CommandContext(ctx, bin, "migrate", "--database-url", poisonedDB, "--slot", poisonedSlot).CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate: %v\n%s", err, out)
	}
	config := fmt.Sprintf("brokers: %s\nmetrics-addr: %s\nmax-record-bytes: 4096\npipelines:\n  - name: orders\n    database-url: %s\n    slot: %s\n    dead-letter-topic: %s\n"+
		"  - name: poisoned\n    database-url: %s\n    slot: %s\n", brokers, addr, db, slot, dlt, poisonedDB, poisonedSlot)
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	run := exec.Command(bin, "run", "--config", file)
	var logs strings.Builder
	run.Stdout, run.Stderr = &logs, &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = run.Process.Signal(syscall.SIGTERM)
		_ = run.Wait()
		if t.Failed() {
			t.Logf("outboxd's log:\n%s", logs.String())
		}
	})

	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, '{"n": 1}'), (gen_random_uuid(), $1, jsonb_build_object('pad', repeat('x', 8000)))`, topic); err != nil {
		t.Fatal(err)
	}
	poisoned, err := pgx.Connect(ctx, poisonedDB)
	if err != nil {
		t.Fatal(err)
	}
	defer poisoned.Close(context.WithoutCancel(ctx))
	if _, err := poisoned.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, jsonb_build_object('pad', repeat('x', 8000)))`, topic); err != nil {
		t.Fatal(err)
	}
	var families map[string]*dto.MetricFamily
	testenv.Eventually(t, 2*time.Minute, "outboxd to publish one row and dead-letter the other, and the poisoned pipeline backing off", func() bool {
		families = scrape(ctx, addr)
		return sampled(families, "outboxd_records_published_total") && sampled(families, "outboxd_dead_lettered_total") &&
			stateOf(families, "poisoned") == "backing off"
	})
	if code := get(ctx, addr, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d with one pipeline backing off, want 200: readiness is the process's", code)
	}
	firing := evaluate(t, ctx, addr)
	if got := firing["OutboxdPipelineStopped"]; !slices.Equal(got, []string{"poisoned"}) {
		t.Errorf("OutboxdPipelineStopped's query sees pipelines %v, want [poisoned]; every alert's: %v", got, firing)
	}
	for alert, pipelines := range firing {
		if slices.Contains(pipelines, "orders") {
			t.Errorf("%s's query sees the healthy pipeline orders", alert)
		}
	}

	var sels []selector
	for _, q := range append(ruleQueries(t), dashboardQueries(t)...) {
		s, err := selectors(q)
		if err != nil {
			t.Fatal(err)
		}
		sels = append(sels, s...)
	}
	for _, p := range check(families, sels) {
		t.Error(p)
	}
	names := map[string]bool{}
	for _, s := range sels {
		names[s.metric] = true
	}
	fmt.Fprintf(os.Stderr, "measured: %d metrics selected by %d alert and panel queries, all exported by outboxd run --config with their labels and values\n", len(names), len(sels))
}

// scrape reads GET /metrics at addr; nil until it answers.
func scrape(ctx context.Context, addr string) map[string]*dto.MetricFamily {
	code, body := testenv.HTTPGet(ctx, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		return nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	return families
}

// sampled reports whether families has a sample of name above 0.
func sampled(families map[string]*dto.MetricFamily, name string) bool {
	for _, m := range families[name].GetMetric() {
		if m.GetCounter().GetValue() > 0 {
			return true
		}
	}
	return false
}

// stateOf is pipeline's state in families (outboxd_state at 1).
func stateOf(families map[string]*dto.MetricFamily, pipeline string) string {
	for _, m := range families["outboxd_state"].GetMetric() {
		var p, state string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "pipeline":
				p = l.GetValue()
			case "state":
				state = l.GetValue()
			}
		}
		if p == pipeline && m.GetGauge().GetValue() == 1 {
			return state
		}
	}
	return ""
}

// get is the status code of GET path at addr (0: no answer).
func get(ctx context.Context, addr, path string) int {
	code, _ := testenv.HTTPGet(ctx, "http://"+addr+path)
	return code
}

// evaluate scrapes addr three times, a second apart, as Prometheus would
// (adding namespace, job and instance), and evaluates every alert's
// expression at the last scrape: for each alert, the pipelines its query
// returns ("" for a series without one).
func evaluate(t *testing.T, ctx context.Context, addr string) map[string][]string {
	t.Helper()
	st := teststorage.New(t)
	start := time.Now()
	var last time.Time
	for i := range 3 {
		if i > 0 {
			time.Sleep(time.Second)
		}
		last = start.Add(time.Duration(i) * time.Second)
		app := st.Appender(ctx)
		for name, f := range scrape(ctx, addr) {
			for _, m := range f.GetMetric() {
				for _, sm := range samplesOf(name, f.GetType(), m) {
					b := labels.NewBuilder(labels.FromStrings("__name__", sm.name, "namespace", "test", "job", "outboxd", "instance", addr))
					for _, l := range m.GetLabel() {
						b.Set(l.GetName(), l.GetValue())
					}
					for k, v := range sm.labels {
						b.Set(k, v)
					}
					if _, err := app.Append(0, b.Labels(), last.UnixMilli(), sm.value); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1 << 20, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	firing := map[string][]string{}
	for _, q := range ruleQueries(t) {
		alert := strings.TrimPrefix(q.from, "alert ")
		qry, err := engine.NewInstantQuery(ctx, st, nil, q.expr, last)
		if err != nil {
			t.Fatalf("%s: %v", q.from, err)
		}
		res := qry.Exec(ctx)
		if res.Err != nil {
			t.Fatalf("%s: %v", q.from, res.Err)
		}
		vec, _ := res.Vector()
		for _, s := range vec {
			firing[alert] = append(firing[alert], s.Metric.Get("pipeline"))
		}
		slices.Sort(firing[alert])
	}
	return firing
}

// sample is one series' value of a scraped metric.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samplesOf are the series of a scraped metric as Prometheus stores them.
func samplesOf(name string, typ dto.MetricType, m *dto.Metric) []sample {
	switch typ {
	case dto.MetricType_COUNTER:
		return []sample{{name: name, value: m.GetCounter().GetValue()}}
	case dto.MetricType_GAUGE:
		return []sample{{name: name, value: m.GetGauge().GetValue()}}
	case dto.MetricType_UNTYPED:
		return []sample{{name: name, value: m.GetUntyped().GetValue()}}
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		out := []sample{{name: name + "_count", value: float64(h.GetSampleCount())}, {name: name + "_sum", value: h.GetSampleSum()}}
		for _, b := range h.GetBucket() {
			out = append(out, sample{name: name + "_bucket", labels: map[string]string{"le": fmt.Sprint(b.GetUpperBound())}, value: float64(b.GetCumulativeCount())})
		}
		return append(out, sample{name: name + "_bucket", labels: map[string]string{"le": "+Inf"}, value: float64(h.GetSampleCount())})
	}
	return nil
}
