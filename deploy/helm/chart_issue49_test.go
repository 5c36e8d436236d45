package helm

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	common "helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartv2util "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// renderValues renders the chart with the values in YAML.
func renderValues(t *testing.T, values string) (map[string]string, error) {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &v); err != nil {
		t.Fatal(err)
	}
	return render(v)
}

// statefulSet is the one StatefulSet rendered with values.
func statefulSet(t *testing.T, values string) *appsv1.StatefulSet {
	t.Helper()
	manifests, err := renderValues(t, values)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := decoder(t).Decode([]byte(manifests["outboxd/templates/statefulset.yaml"]), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*appsv1.StatefulSet)
}

func env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// Issue 49, item 2: GOMEMLIMIT was the container's memory limit itself, so
// the Go runtime let the heap reach it and the kernel killed the pod. It is
// 90 % of the limit, in bytes; none without a limit; a quantity the chart
// cannot read is refused.
func TestGOMEMLIMITIsBelowTheMemoryLimit(t *testing.T) {
	for _, c := range []struct{ limit, want, refused string }{
		{limit: "256Mi", want: "241591910"},
		{limit: "1Gi", want: "966367641"},
		{limit: "500M", want: "450000000"},
		{limit: "", want: ""},
		{limit: "1.5Gi", refused: `resources.limits.memory "1.5Gi"`},
	} {
		values := "resources: {limits: {memory: " + c.limit + "}}"
		if c.limit == "" {
			values = "resources: {limits: null}" // null removes the default limit, as in helm --set
		}
		if c.refused != "" {
			if _, err := renderValues(t, values); err == nil || !strings.Contains(err.Error(), c.refused) {
				t.Errorf("limit %s: %v, want it refused naming it", c.limit, err)
			}
			continue
		}
		got, set := env(statefulSet(t, values).Spec.Template.Spec.Containers[0], "GOMEMLIMIT")
		if got != c.want || set != (c.want != "") {
			t.Errorf("limit %q: GOMEMLIMIT %q (set %v), want %q", c.limit, got, set, c.want)
		}
	}
}

// Issue 49, item 22: a database URL with a password landed in the
// pipelines file's ConfigMap; a misspelt key (slto:) rendered and failed
// only when the pod started. Passwords in the file are refused (files of
// secretMounts, or ${VAR} from env, are how to give them), and
// values.schema.json refuses keys that are neither the chart's nor run's
// flags. Issue 49, item 15: a rankDelay not above the slot retry interval
// cannot hand pipelines over in rank order, and is refused.
func TestChartRefusesSecretsTyposAndWhatCannotWork(t *testing.T) {
	for _, c := range []struct{ name, values, want string }{
		{"a database URL with a password", `pipelines: [{name: orders, database-url: "postgres://app:hunter2@db/app", slot: s}]`,
			"pipelines[orders].database-url holds a password"},
		{"a keyword/value URL with a password", `pipelines: [{name: orders, database-url: "host=db password=hunter2 dbname=app", slot: s}]`,
			"pipelines[orders].database-url holds a password"},
		{"a SASL password in the settings", `settings: {brokers: "k:9092", kafka-sasl-password: hunter2}`, "settings.kafka-sasl-password: a password in the pipelines file"},
		{"a registry password", `pipelines: [{name: orders, database-url-file: /s/url, schema-registry-password: hunter2}]`, "pipelines[orders].schema-registry-password"},
		{"a misspelt pipeline key", `pipelines: [{name: orders, database-url-file: /s/url, slto: s}]`, "slto"},
		{"a misspelt setting", `settings: {brokers: "k:9092", delivry: exactly-once}`, "delivry"},
		{"a misspelt value", `replica: 3`, "replica"},
		{"a rank delay at the slot retry interval", `{rankDelay: 1s, settings: {brokers: "k:9092", slot-retry-interval: 1s}}`, "rankDelay 1s: keep it above settings.slot-retry-interval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderValues(t, c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("rendering %s: %v, want an error saying %q", c.values, err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
	for _, ok := range []string{
		`pipelines: [{name: orders, database-url: "${ORDERS_URL}", slot: s}]`,
		`pipelines: [{name: orders, database-url: "postgres://app@db/app", slot: s}]`,
		`settings: {brokers: "k:9092", kafka-sasl-password: "${KAFKA_PASSWORD}"}`,
		`{rankDelay: 500ms, settings: {brokers: "k:9092", slot-retry-interval: 200ms}}`,
	} {
		if _, err := renderValues(t, ok); err != nil {
			t.Errorf("rendering %s: %v, want it accepted", ok, err)
		}
	}
}

// The schema's keys of a pipeline and of settings are run's flags (and
// migrate's own-table, partitioned and extend-publication), as docs/configuration.md lists
// them (which a test of the product keeps current): a new flag must reach
// the schema, or the chart refuses it.
func TestValuesSchemaKnowsEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	section := func(cmd string) []string {
		m := regexp.MustCompile(`(?ms)^## outboxd ` + cmd + `\n(.*?)^## `).FindSubmatch(doc)
		var out []string
		for _, f := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)`").FindAllSubmatch(m[1], -1) {
			out = append(out, string(f[1]))
		}
		return out
	}
	want := slices.DeleteFunc(section("run"), func(f string) bool { return f == "config" })
	want = append(want, "own-table", "partitioned", "extend-publication")
	slices.Sort(want)
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Settings  struct{ Properties map[string]any } `json:"settings"`
			Pipelines struct {
				Items struct{ Properties map[string]any } `json:"items"`
			} `json:"pipelines"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var out []string
		for k := range m {
			if k != "name" {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := keys(schema.Properties.Settings.Properties); !slices.Equal(got, want) {
		t.Errorf("values.schema.json's settings keys differ from run's flags:\n got %v\nwant %v", got, want)
	}
	if got := keys(schema.Properties.Pipelines.Items.Properties); !slices.Equal(got, want) {
		t.Errorf("values.schema.json's pipeline keys differ from run's flags:\n got %v\nwant %v", got, want)
	}
}

// Issue 49, item 21: files/alerts.yaml was a symbolic link out of the
// chart's directory, so a copied chart (cp -r) failed to render even with
// the alerts off, and helm package left it out. The chart holds its own
// copy, kept equal to deploy/monitoring/alerts.yaml; a packaged chart,
// loaded from its archive, renders its PrometheusRule from it.
func TestChartIsSelfContained(t *testing.T) {
	mine, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile("../monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine, theirs) {
		t.Error("outboxd/files/alerts.yaml differs from deploy/monitoring/alerts.yaml: copy it over")
	}
	err = filepath.WalkDir(chartDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSymlink != 0 {
			t.Errorf("%s is a symbolic link: a copied or packaged chart loses what it points to", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := chartv2util.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	packaged, err := loader.LoadArchive(f)
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := renderChart(packaged, map[string]any{"prometheusRule": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatalf("rendering the packaged chart: %v", err)
	}
	rule := manifests["outboxd/templates/prometheusrule.yaml"]
	if !strings.Contains(rule, "OutboxdPipelineStopped") || !strings.Contains(rule, "OutboxdConfigReloadFailed") {
		t.Errorf("the packaged chart's PrometheusRule lacks the alerts:\n%s", rule)
	}
}

// renderChart renders ch with vals as `helm template` does for an install.
func renderChart(ch *chart.Chart, vals map[string]any) (map[string]string, error) {
	rv, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{Name: "outboxd", Namespace: "outbox", IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, rv)
}

// Issue 49, item 18: the migrate Job ran with the pods' credentials, so the
// role that streams had to be allowed to create tables and slots. With
// migrate.secretMounts (and migrate.env) the Job mounts its own Secrets
// where the pods mount theirs; the pods keep theirs.
func TestMigrateJobRunsWithCredentialsOfItsOwn(t *testing.T) {
	manifests, err := renderValues(t, `
migrate:
  enabled: true
  secretMounts: [{name: outbox-db, secretName: outboxd-outbox-migrate, mountPath: /var/run/secrets/outboxd/outbox}]
  env: [{name: OUTBOXD_LOG_LEVEL, value: debug}]
`)
	if err != nil {
		t.Fatal(err)
	}
	dec := decoder(t)
	var job *batchv1.Job
	for _, doc := range strings.Split(manifests["outboxd/templates/migrate-job.yaml"], "\n---") {
		if o, _, err := dec.Decode([]byte(doc), nil, nil); err == nil {
			if j, ok := o.(*batchv1.Job); ok {
				job = j
			}
		}
	}
	if job == nil {
		t.Fatal("no Job rendered")
	}
	secrets := func(vs []corev1.Volume) []string {
		var out []string
		for _, v := range vs {
			if v.Secret != nil {
				out = append(out, v.Secret.SecretName)
			}
		}
		return out
	}
	if got := secrets(job.Spec.Template.Spec.Volumes); !slices.Equal(got, []string{"outboxd-outbox-migrate"}) {
		t.Errorf("the Job mounts Secrets %v, want its own", got)
	}
	if v, _ := env(job.Spec.Template.Spec.Containers[0], "OUTBOXD_LOG_LEVEL"); v != "debug" {
		t.Errorf("the Job's env %v, want migrate.env", job.Spec.Template.Spec.Containers[0].Env)
	}
	ss := statefulSet(t, "migrate: {enabled: true, secretMounts: [{name: outbox-db, secretName: outboxd-outbox-migrate, mountPath: /var/run/secrets/outboxd/outbox}]}")
	if got := secrets(ss.Spec.Template.Spec.Volumes); !slices.Equal(got, []string{"outboxd-outbox"}) {
		t.Errorf("the pods mount Secrets %v, want theirs", got)
	}
}

// Issue 49, item 29: the chart let both replicas land on one node. With
// spread: required they never do; preferred lets the scheduler choose; auto
// (the default) is required when the chart can count a node for each
// replica, which helm template cannot: preferred then, and the release
// notes say so.
func TestReplicasSpreadOverNodes(t *testing.T) {
	for _, c := range []struct{ spread, want string }{
		{"required", "DoNotSchedule"},
		{"preferred", "ScheduleAnyway"},
		{"auto", "ScheduleAnyway"},
	} {
		ss := statefulSet(t, "spread: "+c.spread)
		tsc := ss.Spec.Template.Spec.TopologySpreadConstraints
		if len(tsc) != 1 || string(tsc[0].WhenUnsatisfiable) != c.want {
			t.Errorf("spread %s: %+v, want whenUnsatisfiable %s", c.spread, tsc, c.want)
		}
	}
	manifests, err := renderValues(t, "spread: auto")
	if err != nil {
		t.Fatal(err)
	}
	if notes := manifests["outboxd/templates/NOTES.txt"]; !strings.Contains(notes, "two replicas may share a node") {
		t.Errorf("the release notes do not say the replicas may share a node:\n%s", notes)
	}
}
