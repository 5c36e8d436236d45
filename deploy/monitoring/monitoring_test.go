package monitoring

import (
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
	"github.com/prometheus/prometheus/promql/parser"

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
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$pipeline", ".*", "$job", ".*")

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
var scrapeLabels = []string{"job", "instance", "le"}

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
// the per-topic series appear only then).
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
	config := fmt.Sprintf("brokers: %s\nmetrics-addr: %s\nmax-record-bytes: 4096\ndead-letter-topic: %s\npipelines:\n  - name: orders\n    database-url: %s\n    slot: %s\n", brokers, addr, dlt, db, slot)
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
	var families map[string]*dto.MetricFamily
	testenv.Eventually(t, 2*time.Minute, "outboxd to publish one row and dead-letter the other", func() bool {
		families = scrape(ctx, addr)
		return sampled(families, "outboxd_records_published_total") && sampled(families, "outboxd_dead_lettered_total")
	})

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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
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
