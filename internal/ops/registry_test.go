package ops

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pipelinesByFamily returns, for each outboxd_ metric family reg gathers,
// the pipeline label values of its series, sorted and distinct. A series
// without the label counts under "".
func pipelinesByFamily(t *testing.T, reg prometheus.Gatherer) map[string][]string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "outboxd_") {
			continue
		}
		var names []string
		for _, s := range mf.GetMetric() {
			name := ""
			for _, l := range s.GetLabel() {
				if l.GetName() == "pipeline" {
					name = l.GetValue()
				}
			}
			names = append(names, name)
		}
		slices.Sort(names)
		got[mf.GetName()] = slices.Compact(names)
	}
	return got
}

// registerUsed registers a pipeline's metrics on reg and observes a record
// of each kind, so that every family has a series.
func registerUsed(t *testing.T, reg prometheus.Registerer, name string) (*Metrics, error) {
	t.Helper()
	m, err := NewMetrics(reg, name, fixed{}, nil)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	m.Acknowledged("orders", 10, time.Millisecond, now)
	m.DeadLettered("orders")
	m.Received(now, now)
	return m, nil
}

// TestPipelinesShareARegistry: issue 39, many pipelines in one process.
// Two pipelines' metrics coexist on the process's registry, every series
// labelled with its pipeline; one unregistered, its series go and the
// other's stay; its name registers again, and a name registered twice is
// refused (an error, not a panic: pipelines come and go at run time).
func TestPipelinesShareARegistry(t *testing.T) {
	t.Parallel()
	alone := NewRegistry()
	if _, err := registerUsed(t, alone, "one"); err != nil {
		t.Fatal(err)
	}
	families := slices.Sorted(maps.Keys(pipelinesByFamily(t, alone)))
	if len(families) < 20 {
		t.Fatalf("one pipeline's metrics have %d families: %v", len(families), families)
	}

	reg := NewRegistry()
	ms := map[string]*Metrics{}
	register := func(name string) error {
		m, err := registerUsed(t, reg, name)
		if err == nil {
			ms[name] = m
		}
		return err
	}
	steps := []struct {
		name    string
		do      func() error
		wantErr bool
		want    []string // the pipelines of every family's series
	}{
		{name: "orders registered", do: func() error { return register("orders") }, want: []string{"orders"}},
		{name: "payments registered beside it", do: func() error { return register("payments") }, want: []string{"orders", "payments"}},
		{name: "orders registered twice", do: func() error { return register("orders") }, wantErr: true, want: []string{"orders", "payments"}},
		{name: "orders unregistered", do: func() error { ms["orders"].Unregister(); return nil }, want: []string{"payments"}},
		{name: "orders registered again", do: func() error { return register("orders") }, want: []string{"orders", "payments"}},
		{name: "both unregistered", do: func() error { ms["orders"].Unregister(); ms["payments"].Unregister(); return nil }},
	}
	for _, st := range steps {
		if err := st.do(); (err != nil) != st.wantErr {
			t.Fatalf("%s: error %v, want an error: %v", st.name, err, st.wantErr)
		}
		got := pipelinesByFamily(t, reg)
		if st.want == nil {
			if len(got) != 0 {
				t.Errorf("%s: outboxd_ series remain: %v", st.name, got)
			}
			continue
		}
		if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, families) {
			t.Errorf("%s: families %v, want %v", st.name, names, families)
		}
		for family, pipelines := range got {
			if !slices.Equal(pipelines, st.want) {
				t.Errorf("%s: %s has series of pipelines %q, want %q", st.name, family, pipelines, st.want)
			}
		}
	}
	if got := sample(t, reg, "", "go_goroutines"); got <= 0 {
		t.Errorf("go_goroutines = %v once the pipelines are gone, want the process's", got)
	}
}

// TestNewMetricsRefusesNoName: a series with pipeline="" reads as one
// without the label.
func TestNewMetricsRefusesNoName(t *testing.T) {
	t.Parallel()
	if _, err := NewMetrics(NewRegistry(), "", fixed{}, nil); err == nil {
		t.Error("NewMetrics registered a pipeline without a name")
	}
}
