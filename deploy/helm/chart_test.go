package helm

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	common "helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test.
const chartDir = "outboxd"

// valueSets are the values the chart is linted and rendered with: its
// defaults, and sets that turn every optional object on.
var valueSets = map[string]string{
	"defaults": ``,
	"everything on": `
replicas: 3
image: {repository: registry.example/outboxd, tag: v1.2.3}
settings: {brokers: "kafka-0:9092,kafka-1:9092", delivery: exactly-once}
pipelines:
  - {name: orders, database-url-file: /var/run/secrets/outboxd/orders/url, slot: outboxd_orders}
  - {name: billing, database-url: "${BILLING_URL}", slot: outboxd_billing, publication: billing}
secretMounts:
  - {name: orders-db, secretName: orders-db, mountPath: /var/run/secrets/outboxd/orders}
env:
  - name: BILLING_URL
    valueFrom: {secretKeyRef: {name: billing-db, key: url}}
serviceMonitor: {enabled: true, labels: {release: prometheus}}
prometheusRule: {enabled: true}
networkPolicy:
  enabled: true
  metricsFrom: [{namespaceSelector: {matchLabels: {name: monitoring}}}]
  egress: [{ports: [{port: 5432}, {port: 9092}, {port: 53, protocol: UDP}]}]
migrate: {enabled: true}
`,
	"nothing optional": `
podDisruptionBudget: {enabled: false}
topologySpreadConstraints: [{maxSkew: 2, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}]
`,
}

func values(t *testing.T, set string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(valueSets[set]), &v); err != nil {
		t.Fatalf("value set %q: %v", set, err)
	}
	return v
}

// render renders the chart with vals as `helm template` does for an
// install, and returns each manifest by template.
func render(vals map[string]any) (map[string]string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	rv, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{Name: "outboxd", Namespace: "outbox", IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, rv)
}

// decoder decodes every kind the chart renders into its Kubernetes API
// type, strictly: an unknown or duplicate field is an error.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
		networkingv1.AddToScheme, batchv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// objects renders set and decodes every object it holds.
func objects(t *testing.T, set string) []runtime.Object {
	t.Helper()
	manifests, err := render(values(t, set))
	if err != nil {
		t.Fatalf("rendering %q: %v", set, err)
	}
	dec := decoder(t)
	var objs []runtime.Object
	for _, name := range slices.Sorted(maps.Keys(manifests)) {
		if strings.HasSuffix(name, "NOTES.txt") { // the release notes, not a manifest
			continue
		}
		for _, doc := range strings.Split(manifests[name], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			obj, _, err := dec.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Errorf("%s (%s): %v\n%s", name, set, err, doc)
				continue
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func find[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// helm lint passes for every value set, with no warning.
func TestChartLints(t *testing.T) {
	for _, set := range slices.Sorted(maps.Keys(valueSets)) {
		t.Run(set, func(t *testing.T) {
			l := lint.RunAll(chartDir, values(t, set), "outbox")
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Error(m)
				}
			}
		})
	}
}

// Every value set renders objects that decode strictly into their
// Kubernetes types, and the ones each set asks for are there.
func TestChartRendersValidObjects(t *testing.T) {
	for _, c := range []struct {
		set  string
		want []string // kinds, sorted
	}{
		{"defaults", []string{"ConfigMap", "PodDisruptionBudget", "Service", "StatefulSet"}},
		{"everything on", []string{"ConfigMap", "ConfigMap", "Job", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Service", "ServiceMonitor", "StatefulSet"}},
		{"nothing optional", []string{"ConfigMap", "Service", "StatefulSet"}},
	} {
		t.Run(c.set, func(t *testing.T) {
			var kinds []string
			for _, o := range objects(t, c.set) {
				kinds = append(kinds, fmt.Sprintf("%T", o)[strings.LastIndex(fmt.Sprintf("%T", o), ".")+1:])
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, c.want) {
				t.Errorf("rendered %v, want %v", kinds, c.want)
			}
		})
	}
}

// A decoder that is not strict would let a misspelt field through: the
// check above must catch one.
func TestStrictDecodingCatchesAnUnknownField(t *testing.T) {
	doc := "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {maxUnavailabel: 1}\n"
	if _, _, err := decoder(t).Decode([]byte(doc), nil, nil); err == nil || !strings.Contains(err.Error(), "maxUnavailabel") {
		t.Errorf("decoding a misspelt field: %v, want an error naming it", err)
	}
}

// The pods run as the image's non-root user on a read-only root file
// system with no capability, probe /healthz and /readyz, take their
// replica number from their ordinal and the replica count from the file.
func TestStatefulSetRunsLockedDownAndWiresTheReplicas(t *testing.T) {
	objs := objects(t, "everything on")
	sets := find[*appsv1.StatefulSet](objs)
	if len(sets) != 1 {
		t.Fatalf("%d StatefulSets, want 1", len(sets))
	}
	ss := sets[0]
	pod := ss.Spec.Template.Spec
	c := pod.Containers[0]
	if *ss.Spec.Replicas != 3 || ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("replicas %d, policy %s: want 3, Parallel", *ss.Spec.Replicas, ss.Spec.PodManagementPolicy)
	}
	if c.Image != "registry.example/outboxd:v1.2.3" || !slices.Equal(c.Args, []string{"run", "--config", "/etc/outboxd/pipelines.yaml"}) {
		t.Errorf("container runs %s %v", c.Image, c.Args)
	}
	psc, sc := pod.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || sc == nil:
		t.Fatal("no security context")
	case psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot, psc.RunAsUser == nil || *psc.RunAsUser != 65532:
		t.Errorf("pod security context %+v: want non-root 65532", psc)
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccomp %+v: want RuntimeDefault", psc.SeccompProfile)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem,
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation,
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("container security context %+v: want a read-only root, no escalation, ALL dropped", sc)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes %+v, %+v: want /healthz and /readyz", c.LivenessProbe, c.ReadinessProbe)
	}
	if ss.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("no checksum of the pipelines file on the pod template: a changed file would not roll the pods")
	}
	file := pipelinesFile(t, objs, "outboxd")
	if file["replicas"] != float64(3) || file["metrics-addr"] != ":9187" || file["rank-delay"] != "3s" || file["brokers"] != "kafka-0:9092,kafka-1:9092" {
		t.Errorf("pipelines file %v: want replicas 3, metrics-addr :9187, rank-delay 3s and the settings", file)
	}
	if ps, _ := file["pipelines"].([]any); len(ps) != 2 {
		t.Errorf("pipelines file lists %v, want the 2 pipelines", file["pipelines"])
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["config"] != "/etc/outboxd" || mounts["tmp"] != "/tmp" || mounts["orders-db"] != "/var/run/secrets/outboxd/orders" {
		t.Errorf("mounts %v: want the pipelines file, /tmp and the secret", mounts)
	}
	pdbs := find[*policyv1.PodDisruptionBudget](objs)
	if len(pdbs) != 1 || pdbs[0].Spec.MaxUnavailable.IntValue() != 1 ||
		pdbs[0].Spec.UnhealthyPodEvictionPolicy == nil || *pdbs[0].Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("PodDisruptionBudgets %v: want one, maxUnavailable 1, unready pods always evictable (an outage must not block drains)", pdbs)
	}
	rules := find[*monitoringv1.PrometheusRule](objs)
	if len(rules) != 1 || len(rules[0].Spec.Groups) == 0 || len(rules[0].Spec.Groups[0].Rules) < 5 {
		t.Errorf("PrometheusRule %v: want deploy/monitoring/alerts.yaml's rules", rules)
	}
}

// The migrate Job runs after its own copy of the pipelines file exists
// (hooks run before the release's objects), and its pods are not the
// StatefulSet's: the selectors of the Service, the PodDisruptionBudget and
// the NetworkPolicy must not take them in.
func TestMigrateJobRunsAfterItsFileAndApartFromThePods(t *testing.T) {
	objs := objects(t, "everything on")
	job := find[*batchv1.Job](objs)[0]
	ss := find[*appsv1.StatefulSet](objs)[0]
	var cm *corev1.ConfigMap
	for _, c := range find[*corev1.ConfigMap](objs) {
		if c.Annotations["helm.sh/hook"] != "" {
			cm = c
		}
	}
	switch {
	case cm == nil:
		t.Fatal("no hook ConfigMap for the migrate Job")
	case cm.Annotations["helm.sh/hook"] != job.Annotations["helm.sh/hook"]:
		t.Errorf("hooks %q and %q: want the Job's file created at the Job's hooks", cm.Annotations["helm.sh/hook"], job.Annotations["helm.sh/hook"])
	case weight(cm.Annotations) >= weight(job.Annotations):
		t.Errorf("hook weights %s (ConfigMap) and %s (Job): want the ConfigMap first", cm.Annotations["helm.sh/hook-weight"], job.Annotations["helm.sh/hook-weight"])
	}
	if job.Spec.Template.Spec.Volumes[0].ConfigMap == nil || job.Spec.Template.Spec.Volumes[0].ConfigMap.Name != cm.Name {
		t.Errorf("the Job mounts %+v, want its own ConfigMap %s", job.Spec.Template.Spec.Volumes[0], cm.Name)
	}
	selector := ss.Spec.Selector.MatchLabels
	matches := true
	for k, v := range selector {
		if job.Spec.Template.Labels[k] != v {
			matches = false
		}
	}
	if matches {
		t.Errorf("the Job's pod labels %v match the StatefulSet's selector %v", job.Spec.Template.Labels, selector)
	}
}

// weight is a hook's weight, 0 when unset as Helm takes it.
func weight(annotations map[string]string) int {
	w, _ := strconv.Atoi(annotations["helm.sh/hook-weight"])
	return w
}

// pipelinesFile is the pipelines.yaml of ConfigMap name.
func pipelinesFile(t *testing.T, objs []runtime.Object, name string) map[string]any {
	t.Helper()
	for _, cm := range find[*corev1.ConfigMap](objs) {
		if cm.Name == name {
			f := map[string]any{}
			if err := yaml.Unmarshal([]byte(cm.Data["pipelines.yaml"]), &f); err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no ConfigMap %s", name)
	return nil
}

// Values the chart cannot run are refused when it is rendered, naming the
// value.
func TestChartRefusesValuesItCannotRun(t *testing.T) {
	for _, c := range []struct{ name, values, want string }{
		{"no pipeline", "pipelines: []", "pipelines: at least one pipeline is required"},
		{"a setting the chart owns", "settings: {replicas: 5}", "settings.replicas: the chart sets it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := map[string]any{}
			if err := yaml.Unmarshal([]byte(c.values), &v); err != nil {
				t.Fatal(err)
			}
			_, err := render(v)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("rendering %s: %v, want an error saying %q", c.values, err, c.want)
			}
		})
	}
}
