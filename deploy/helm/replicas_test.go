package helm

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/twmb/franz-go/pkg/kgo"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/harness/testenv"
)

// pod is one replica as the chart would run it, mapped onto this machine:
// the rendered container's arguments and environment, the rendered files
// under dir instead of their mount paths, its own host name (the pod's,
// outboxd's replica number) in a UTS namespace of its own, and its own
// metrics port (each pod has its own network in a cluster).
type pod struct {
	name, metrics string
	cmd           *exec.Cmd
	done          chan error
	logs          *testenv.SyncBuffer
}

// mapped is the chart's rendered StatefulSet and Job, with their files
// written under root.
type mapped struct {
	root      string
	container corev1.Container
	migrate   corev1.Container
	file      string            // the rendered pipelines file
	mounts    map[string]string // mount path -> directory here
}

// mapChart renders the chart with vals and maps its pods onto root: the
// ConfigMap's pipelines file and the Secrets' files (secrets, by Secret
// name and key) where the pods would mount them.
func mapChart(t *testing.T, vals map[string]any, secrets map[string]map[string]string) mapped {
	t.Helper()
	manifests, err := render(vals)
	if err != nil {
		t.Fatal(err)
	}
	dec := decoder(t)
	var objs []runtime.Object
	for name, m := range manifests {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for _, doc := range strings.Split(m, "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			o, _, err := dec.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, o)
		}
	}
	sets, jobs := find[*appsv1.StatefulSet](objs), find[*batchv1.Job](objs)
	if len(sets) != 1 || len(jobs) != 1 {
		t.Fatalf("%d StatefulSets and %d Jobs rendered, want 1 each", len(sets), len(jobs))
	}
	m := mapped{root: t.TempDir(), container: sets[0].Spec.Template.Spec.Containers[0], migrate: jobs[0].Spec.Template.Spec.Containers[0], mounts: map[string]string{}}
	volumes := map[string]corev1.Volume{}
	for _, v := range sets[0].Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	configMaps := map[string]*corev1.ConfigMap{}
	for _, cm := range find[*corev1.ConfigMap](objs) {
		configMaps[cm.Name] = cm
	}
	for _, vm := range m.container.VolumeMounts {
		dir := filepath.Join(m.root, vm.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		m.mounts[vm.MountPath] = dir
		v := volumes[vm.Name]
		var files map[string]string
		switch {
		case v.ConfigMap != nil:
			files = configMaps[v.ConfigMap.Name].Data
			m.file = files["pipelines.yaml"]
		case v.Secret != nil:
			files = secrets[v.Secret.SecretName]
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return m
}

// path maps a path inside the pod onto this machine.
func (m mapped) path(p string) string {
	for mount, dir := range m.mounts {
		if rest, ok := strings.CutPrefix(p, mount+"/"); ok {
			return filepath.Join(dir, rest)
		}
	}
	return p
}

// start starts replica name of the StatefulSet (its host name), with
// metrics on a port of its own, running the rendered container c with
// bin as the image's entrypoint.
func (m mapped) start(t *testing.T, bin string, c corev1.Container, name string) *pod {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	// The pod's own copy of the file, its metrics address mapped.
	var file map[string]any
	if err := yaml.Unmarshal([]byte(m.file), &file); err != nil {
		t.Fatal(err)
	}
	file["metrics-addr"] = addr
	for _, p := range file["pipelines"].([]any) {
		for k, v := range p.(map[string]any) {
			if s, ok := v.(string); ok && strings.HasSuffix(k, "-file") {
				p.(map[string]any)[k] = m.path(s)
			}
		}
	}
	b, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(t.TempDir(), "pipelines.yaml")
	if err := os.WriteFile(own, b, 0o600); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		if a == "/etc/outboxd/pipelines.yaml" {
			args[i] = own
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			lim := c.Resources.Limits[corev1.ResourceMemory]
			env = append(env, fmt.Sprintf("%s=%d", e.Name, lim.Value()))
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			t.Fatalf("env %s: a source this test does not map", e.Name)
		}
	}
	// A UTS namespace of its own with the pod's host name, from which
	// outboxd takes its replica number.
	cmd := exec.Command("unshare", append([]string{"--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, name, bin}, args...)...)
	cmd.Env = env
	p := &pod{name: name, metrics: addr, cmd: cmd, done: make(chan error, 1), logs: &testenv.SyncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.log())
		}
	})
	return p
}

func (p *pod) log() string { return p.logs.String() }

// get is the status code of GET path on p's metrics address (0: no answer).
func (p *pod) get(ctx context.Context, path string) int {
	code, _ := testenv.HTTPGet(ctx, "http://"+p.metrics+path)
	return code
}

// streaming is the pipelines p streams (GET /pipelines); nil if it does
// not answer.
func (p *pod) streaming(ctx context.Context) []string {
	var names []string
	for _, pl := range p.states(ctx) {
		if pl.State == "streaming" {
			names = append(names, pl.Name)
		}
	}
	return names
}

// The container the chart renders, with exactly its arguments and
// environment (paths and ports mapped), runs as two replicas: the Job's
// migrate prepares the databases, each pipeline streams on one replica,
// a SIGTERM (a rolling update) hands a replica's pipelines to the other
// with no duplicate, the replica comes back and takes its own back, and a
// kill -9 of the one holding everything leaves the other to take it all
// over with nothing lost.
func TestRenderedReplicasTakeOverAndHandOver(t *testing.T) {
	ctx := t.Context()
	bin, remove, err := testbed.BuildOutboxd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	brokers := strings.Join(testenv.Brokers(t), ",")
	names := []string{"orders", "billing", "users", "stock", "payments", "shipping"}
	dbs := map[string]string{}
	secrets := map[string]map[string]string{}
	var pipelines []any
	var mounts []any
	for _, n := range names {
		dbs[n] = testenv.Database(t)
		secrets["db-"+n] = map[string]string{"url": dbs[n]}
		pipelines = append(pipelines, map[string]any{"name": n, "database-url-file": "/var/run/secrets/outboxd/" + n + "/url", "slot": testenv.Name(t, "s_"+n)})
		mounts = append(mounts, map[string]any{"name": "db-" + n, "secretName": "db-" + n, "mountPath": "/var/run/secrets/outboxd/" + n})
	}
	topic := testenv.Topic(t, 1)
	vals := map[string]any{
		"settings": map[string]any{"brokers": brokers, "slot-retry-interval": "500ms"},
		// rankDelay: the chart's default (3s), so that the SIGTERM
		// hand-over's gap is what a user gets.
		"pipelines":    pipelines,
		"secretMounts": mounts,
		"migrate":      map[string]any{"enabled": true},
	}
	m := mapChart(t, vals, secrets)

	// The Job's migrate, as the pre-install hook would run it.
	job := m.start(t, bin, m.migrate, "outboxd-migrate")
	if err := <-job.done; err != nil {
		t.Fatalf("the rendered migrate Job: %v\n%s", err, job.log())
	}

	pods := []*pod{m.start(t, bin, m.container, "outboxd-0"), m.start(t, bin, m.container, "outboxd-1")}
	holders := func() map[string]string {
		h := map[string]string{}
		for _, p := range pods {
			if p == nil {
				continue
			}
			for _, n := range p.streaming(ctx) {
				h[n] = p.name
			}
		}
		return h
	}
	allStreaming := func(on ...string) func() bool {
		return func() bool {
			h := holders()
			for _, n := range names {
				if h[n] == "" || (len(on) > 0 && !slices.Contains(on, h[n])) {
					return false
				}
			}
			return true
		}
	}
	testenv.Eventually(t, time.Minute, "every pipeline streaming on one of the two replicas", allStreaming())
	before := holders()
	t.Logf("spread over the replicas: %v", before)
	// The probes the chart sets: a standby is alive and ready too, so
	// neither probe restarts or unlists the replica waiting for a slot.
	for _, p := range pods {
		for _, path := range []string{m.container.LivenessProbe.HTTPGet.Path, m.container.ReadinessProbe.HTTPGet.Path} {
			if code := p.get(ctx, path); code != http.StatusOK {
				t.Errorf("%s: GET %s = %d with %d pipelines streaming there, want 200", p.name, path, code, len(p.streaming(ctx)))
			}
		}
	}
	// Each took its replica number from its host name, as a pod does.
	for i, p := range pods {
		if want := fmt.Sprintf("replica=%d replicas=2", i); !strings.Contains(p.log(), want) {
			t.Errorf("%s's log does not say %q: it did not take its replica number from its host name", p.name, want)
		}
	}

	next := 0
	write := func(n int) []string {
		var ids []string
		for _, name := range names {
			conn, err := pgx.Connect(ctx, dbs[name])
			if err != nil {
				t.Fatal(err)
			}
			for range n {
				next++
				var id string
				if err := conn.QueryRow(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, jsonb_build_object('n', $2::int)) RETURNING id::text`, topic, next).Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, fmt.Sprint(next))
			}
			conn.Close(ctx)
		}
		return ids
	}
	var written []string
	written = append(written, write(20)...)

	// A rolling update: SIGTERM to the replica holding the most.
	victim := pods[0]
	if n := strings.Count(fmt.Sprint(before), "outboxd-1"); n > strings.Count(fmt.Sprint(before), "outboxd-0") {
		victim = pods[1]
	}
	termed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	written = append(written, write(20)...)
	if err := <-victim.done; err != nil {
		t.Errorf("%s after SIGTERM: %v, want a clean exit", victim.name, err)
	}
	survivor := pods[0]
	if victim == pods[0] {
		survivor = pods[1]
	}
	for i := range pods {
		if pods[i] == victim {
			pods[i] = nil
		}
	}
	testenv.Eventually(t, time.Minute, "the survivor streaming every pipeline", allStreaming(survivor.name))
	handedOver := time.Since(termed)
	written = append(written, write(20)...)
	seen := consume(t, ctx, topic, written)
	for n, c := range seen {
		if c > 1 {
			t.Errorf("payload n=%s published %d times across a SIGTERM hand-over, want once", n, c)
		}
	}

	// The replica comes back and takes back its own, gracefully.
	back := m.start(t, bin, m.container, victim.name)
	for i := range pods {
		if pods[i] == nil {
			pods[i] = back
		}
	}
	testenv.Eventually(t, time.Minute, "the returning replica taking its pipelines back", func() bool {
		h := holders()
		return allStreaming()() && slices.ContainsFunc(names, func(n string) bool { return h[n] == back.name })
	})
	written = append(written, write(20)...)
	seen = consume(t, ctx, topic, written)
	for n, c := range seen {
		if c > 1 {
			t.Errorf("payload n=%s published %d times across hand-overs, want once", n, c)
		}
	}

	// kill -9 of the replica holding the most: the other takes all.
	h := holders()
	dead, other := pods[0], pods[1]
	if strings.Count(fmt.Sprint(h), pods[1].name) > strings.Count(fmt.Sprint(h), pods[0].name) {
		dead, other = pods[1], pods[0]
	}
	if err := dead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dead.done
	for i := range pods {
		if pods[i] == dead {
			pods[i] = nil
		}
	}
	killed := time.Now()
	testenv.Eventually(t, time.Minute, "the other replica taking every pipeline over after kill -9", allStreaming(other.name))
	takeover := time.Since(killed)
	written = append(written, write(20)...)
	consume(t, ctx, topic, written) // at least once each; duplicates allowed after kill -9
	fmt.Fprintf(os.Stderr, "measured: the rendered StatefulSet as 2 replicas over %d pipelines: spread %v; SIGTERM hand-over in %.1f s (from the signal to every pipeline streaming on the other replica) and hand-back with 0 duplicates; kill -9 of %s taken over in %.1f s; %d rows, none lost\n",
		len(names), before, handedOver.Seconds(), dead.name, takeover.Seconds(), len(written))
}

// consume reads topic from its start until every payload n in want has
// arrived, and returns how often each arrived.
func consume(t *testing.T, ctx context.Context, topic string, want []string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Brokers(t)...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	deadline := time.Now().Add(time.Minute)
	for {
		missing := 0
		for _, n := range want {
			if seen[n] == 0 {
				missing++
			}
		}
		if missing == 0 {
			// Whatever else is already in the topic (duplicates).
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := cl.PollFetches(pctx)
			cancel()
			count(fs, seen)
			return seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows not published within a minute", missing, len(want))
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		count(fs, seen)
	}
}

func count(fs kgo.Fetches, seen map[string]int) {
	fs.EachRecord(func(r *kgo.Record) {
		var v struct {
			N json.Number `json:"n"`
		}
		if json.Unmarshal(r.Value, &v) == nil && v.N != "" {
			seen[v.N.String()]++
		}
	})
}

// TestRenderedReplicasStayReady is issue 49, items 1 and 17: /readyz
// answered 503 on a replica whenever one of its pipelines was not
// streaming with Kafka reachable: a standby's slot retries (each passing
// through "starting") made it flap, 36-49 % of polls over 20 pipelines;
// one pipeline backing off after a poison row, or one database refusing
// its credentials, made every replica not ready in turn. A StatefulSet's
// rolling update waits for each pod to be ready, so helm upgrade stalled.
// The chart's two replicas here run 50 pipelines, one of which meets a
// poison row and one of which names a role the database does not know;
// both replicas' readiness probes, polled every 100 ms for a minute,
// never fail.
func TestRenderedReplicasStayReady(t *testing.T) {
	ctx := t.Context()
	bin, remove, err := testbed.BuildOutboxd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	const n = 50
	// A server of the test's own: 2 replicas of 50 pipelines need more
	// slots, senders and connections than the shared one keeps free.
	pg := testenv.StartPostgres(t)
	admin, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER SYSTEM SET max_replication_slots = 128`, `ALTER SYSTEM SET max_wal_senders = 128`, `ALTER SYSTEM SET max_connections = 600`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	admin.Close(ctx)
	if err := pg.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	brokers := strings.Join(testenv.Brokers(t), ",")
	topic := testenv.Topic(t, 3)
	secrets := map[string]map[string]string{}
	var pipelines, mounts []any
	var migrate strings.Builder
	fmt.Fprintf(&migrate, "brokers: %s\npipelines:\n", brokers)
	dbs := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("p%02d", i)
		url := testenv.DatabaseOn(t, pg.URL)
		dbs[name] = url
		if name == "p49" {
			// A database that refuses the pipeline's credentials.
			url = strings.Replace(url, "postgres://postgres@", "postgres://nosuchrole@", 1)
		}
		secrets["db-"+name] = map[string]string{"url": url}
		p := map[string]any{"name": name, "database-url-file": "/var/run/secrets/outboxd/" + name + "/url", "slot": "s_" + name}
		if name == "p00" {
			p["max-record-bytes"] = 4096 // its poison row is larger
		}
		pipelines = append(pipelines, p)
		mounts = append(mounts, map[string]any{"name": "db-" + name, "secretName": "db-" + name, "mountPath": "/var/run/secrets/outboxd/" + name})
		if name != "p49" {
			fmt.Fprintf(&migrate, "  - name: %s\n    database-url: %s\n    slot: s_%s\n", name, url, name)
		}
	}
	file := filepath.Join(t.TempDir(), "migrate.yaml")
	if err := os.WriteFile(file, []byte(migrate.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, bin, "migrate", "--config", file).CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate --config: %v\n%s", err, out)
	}
	m := mapChart(t, map[string]any{
		"settings":     map[string]any{"brokers": brokers},
		"pipelines":    pipelines,
		"secretMounts": mounts,
		"migrate":      map[string]any{"enabled": true}, // rendered, not run: migrate above leaves the refused database out
	}, secrets)
	pods := []*pod{m.start(t, bin, m.container, "outboxd-0"), m.start(t, bin, m.container, "outboxd-1")}
	testenv.Eventually(t, 2*time.Minute, "every pipeline but the refused one streaming on one of the replicas", func() bool {
		streaming := map[string]bool{}
		for _, p := range pods {
			for _, name := range p.streaming(ctx) {
				streaming[name] = true
			}
		}
		return len(streaming) == n-1
	})
	conn, err := pgx.Connect(ctx, dbs["p00"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, jsonb_build_object('pad', repeat('x', 8000)))`, topic); err != nil {
		t.Fatal(err)
	}

	path := m.container.ReadinessProbe.HTTPGet.Path
	polls, failures := map[string]int{}, map[string]int{}
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, p := range pods {
			polls[p.name]++
			if code := p.get(ctx, path); code != http.StatusOK {
				failures[p.name]++
			}
		}
	}
	states := map[string]string{}
	for _, p := range pods {
		for _, st := range p.states(ctx) {
			if st.State != "standby" {
				states[st.Name] = st.State
			}
		}
	}
	for _, p := range pods {
		if failures[p.name] > 0 {
			t.Errorf("%s: GET %s failed %d of %d times over a minute, want none", p.name, path, failures[p.name], polls[p.name])
		}
	}
	if states["p00"] != "backing off" || states["p49"] != "backing off" {
		t.Errorf("p00 (poison row) %q, p49 (refused credentials) %q: want both backing off (the test tested what it says)", states["p00"], states["p49"])
	}
	fmt.Fprintf(os.Stderr, "measured: 2 rendered replicas over %d pipelines, one poisoned and one refused by its database: GET %s polled every 100 ms for a minute, %d and %d polls, %d and %d failures\n",
		n, path, polls["outboxd-0"], polls["outboxd-1"], failures["outboxd-0"], failures["outboxd-1"])
}

// states is what GET /pipelines says of each pipeline on p.
func (p *pod) states(ctx context.Context) []struct{ Name, State string } {
	_, body := testenv.HTTPGet(ctx, "http://"+p.metrics+"/pipelines")
	var st struct {
		Pipelines []struct{ Name, State string } `json:"pipelines"`
	}
	if json.Unmarshal(body, &st) != nil {
		return nil
	}
	return st.Pipelines
}
