package monitoring

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/util/teststorage"
)

// series is one stored series: its labels, and the ages of its samples.
type series struct {
	labels []string // name, value, ...
	value  float64
	ages   []time.Duration // before the evaluation, oldest first
}

// Issue 49, item 8: the alerts aggregated by pipeline alone and looked for
// any outboxd at all, so a deployment streaming pipeline "outbox" hid
// another deployment's outage of its own pipeline "outbox", and a whole
// deployment gone went unnoticed while another reported. The alerts are
// evaluated over two deployments' series here: each fires for the one in
// trouble only.
func TestAlertsTellDeploymentsApart(t *testing.T) {
	t.Parallel()
	now := []time.Duration{time.Minute, 0} // oldest first
	tests := []struct {
		alert  string
		series []series
		want   []string // the namespaces it fires for
	}{
		{
			alert: "OutboxdNoPipelineStreaming",
			series: []series{
				{labels: []string{"__name__", "outboxd_state", "namespace", "shop", "job", "outboxd", "instance", "a", "pipeline", "outbox", "state", "streaming"}, value: 1, ages: now},
				{labels: []string{"__name__", "outboxd_state", "namespace", "billing", "job", "outboxd", "instance", "b", "pipeline", "outbox", "state", "streaming"}, value: 0, ages: now},
				{labels: []string{"__name__", "outboxd_state", "namespace", "billing", "job", "outboxd", "instance", "b", "pipeline", "outbox", "state", "backing off"}, value: 1, ages: now},
				// Paused by an operator (issue 53): not streamed on purpose.
				{labels: []string{"__name__", "outboxd_state", "namespace", "ops", "job", "outboxd", "instance", "c", "pipeline", "outbox", "state", "streaming"}, value: 0, ages: now},
				{labels: []string{"__name__", "outboxd_state", "namespace", "ops", "job", "outboxd", "instance", "c", "pipeline", "outbox", "state", "paused"}, value: 1, ages: now},
			},
			want: []string{"billing"},
		},
		{
			alert: "OutboxdDeploymentAbsent",
			series: []series{
				{labels: []string{"__name__", "outboxd_state", "namespace", "shop", "job", "outboxd", "instance", "a", "pipeline", "outbox", "state", "streaming"}, value: 1, ages: now},
				// Reported until two hours ago.
				{labels: []string{"__name__", "outboxd_state", "namespace", "billing", "job", "outboxd", "instance", "b", "pipeline", "outbox", "state", "streaming"}, value: 1,
					ages: []time.Duration{3 * time.Hour, 2 * time.Hour}},
			},
			want: []string{"billing"},
		},
	}
	exprs := map[string]string{}
	for _, q := range ruleQueries(t) {
		exprs[strings.TrimPrefix(q.from, "alert ")] = q.expr
	}
	for _, tt := range tests {
		t.Run(tt.alert, func(t *testing.T) {
			t.Parallel()
			expr, ok := exprs[tt.alert]
			if !ok {
				t.Fatalf("alerts.yaml has no alert %s", tt.alert)
			}
			ctx := context.Background()
			st := teststorage.New(t)
			at := time.Now()
			for _, s := range tt.series {
				for _, age := range s.ages {
					app := st.Appender(ctx)
					if _, err := app.Append(0, labels.FromStrings(s.labels...), at.Add(-age).UnixMilli(), s.value); err != nil {
						t.Fatal(err)
					}
					if err := app.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			}
			engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1 << 20, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
			qry, err := engine.NewInstantQuery(ctx, st, nil, expr, at)
			if err != nil {
				t.Fatal(err)
			}
			res := qry.Exec(ctx)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			vec, _ := res.Vector()
			var got []string
			for _, s := range vec {
				got = append(got, s.Metric.Get("namespace"))
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("%s fires for namespaces %v, want %v", tt.alert, got, tt.want)
			}
		})
	}
}
