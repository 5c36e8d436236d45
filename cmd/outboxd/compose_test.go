package main

// Checks of the container packaging that need no Docker engine:
// docker-compose.yml against the flags this binary really registers (so an
// OUTBOXD_* variable that no flag reads, or a value the flag rejects, fails
// here rather than at `docker compose up`), and the Dockerfile's build and
// final stages. Each check also runs against broken copies, so it is known to
// fail when it should.

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/outboxd/outboxd/internal/config"
)

const (
	composePath      = "../../docker-compose.yml"
	dockerfilePath   = "../../Dockerfile"
	dockerignorePath = "../../.dockerignore"
	repoRoot         = "../.."
)

// outboxdCommands builds each command's FlagSet exactly as the binary does.
var outboxdCommands = map[string]func() (*config.Config, *flag.FlagSet){
	"run": func() (*config.Config, *flag.FlagSet) {
		cfg := config.Default()
		return &cfg, runFlags(&cfg, io.Discard)
	},
	"migrate": func() (*config.Config, *flag.FlagSet) {
		cfg := config.Default()
		fs, _ := migrateFlags(&cfg, io.Discard)
		return &cfg, fs
	},
}

// pendingFlags are flags being added to a command right now. While one is
// not registered yet, its variable is skipped with a note instead of failing;
// once it is registered it is checked like any other.
var pendingFlags = map[string][]string{"run": {"metrics-addr"}}

// The compose file, as far as these checks read it.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string        `yaml:"image"`
	Build       *composeBuild `yaml:"build"`
	Command     stringOrList  `yaml:"command"`
	Environment composeEnv    `yaml:"environment"`
	DependsOn   composeDeps   `yaml:"depends_on"`
	Healthcheck *struct {
		Test    stringOrList `yaml:"test"`
		Disable bool         `yaml:"disable"`
	} `yaml:"healthcheck"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
	Target     string `yaml:"target"`
}

func (b *composeBuild) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode { // build: ./dir
		b.Context = n.Value
		return nil
	}
	type plain composeBuild
	return n.Decode((*plain)(b))
}

// stringOrList is a command: a list, or a string compose splits like a shell.
type stringOrList []string

func (s *stringOrList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = strings.Fields(n.Value)
		return nil
	}
	return n.Decode((*[]string)(s))
}

// composeEnv is environment: a mapping, or a list of KEY=VALUE.
type composeEnv map[string]string

func (e *composeEnv) UnmarshalYAML(n *yaml.Node) error {
	*e = composeEnv{}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			(*e)[n.Content[i].Value] = n.Content[i+1].Value // a null value reads as ""
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			k, v, _ := strings.Cut(item.Value, "=")
			(*e)[k] = v
		}
	default:
		return fmt.Errorf("line %d: environment is neither a mapping nor a list", n.Line)
	}
	return nil
}

// composeDeps is depends_on: a list of services, or a mapping to conditions.
type composeDeps map[string]string

func (d *composeDeps) UnmarshalYAML(n *yaml.Node) error {
	*d = composeDeps{}
	switch n.Kind {
	case yaml.SequenceNode:
		for _, item := range n.Content {
			(*d)[item.Value] = "service_started"
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		for name, dep := range m {
			if dep.Condition == "" {
				dep.Condition = "service_started"
			}
			(*d)[name] = dep.Condition
		}
	default:
		return fmt.Errorf("line %d: depends_on is neither a list nor a mapping", n.Line)
	}
	return nil
}

var composeVarRef = regexp.MustCompile(`\$\$|\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}|\$`)

// interpolate resolves compose's $$ escape and ${NAME:-default} (or
// ${NAME-default}) to what compose passes when NAME is unset; any other
// variable reference cannot be checked here and is an error.
func interpolate(v string) (string, error) {
	var err error
	out := composeVarRef.ReplaceAllStringFunc(v, func(m string) string {
		switch m {
		case "$$":
			return "$"
		case "$":
			err = fmt.Errorf("variable reference in %q cannot be checked; use ${NAME:-default}", v)
			return m
		}
		return composeVarRef.FindStringSubmatch(m)[1]
	})
	return out, err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkCompose returns what is wrong with a compose file, and notes about
// variables skipped because their flag is still being added.
func checkCompose(composeYAML, dockerfile []byte) (problems, notes []string) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var f composeFile
	if err := yaml.Unmarshal(composeYAML, &f); err != nil {
		bad("docker-compose.yml does not parse: %v", err)
		return problems, notes
	}
	for _, name := range []string{"postgres", "kafka", "outboxd", "outboxd-migrate", "example-consumer", "writer"} {
		if _, ok := f.Services[name]; !ok {
			bad("no service %q", name)
		}
	}
	if pg, ok := f.Services["postgres"]; ok && !slices.Contains(pg.Command, "wal_level=logical") {
		bad("postgres: command %q does not set wal_level=logical (outboxd needs a logical replication slot)", pg.Command)
	}

	stages := parseDockerfile(string(dockerfile))
	finalStage := ""
	if len(stages) > 0 {
		finalStage = stages[len(stages)-1].name
	}

	// The addresses Kafka tells clients to use, HOST:PORT.
	advertised := map[string]bool{}
	if kafka, ok := f.Services["kafka"]; ok {
		for _, l := range strings.Split(kafka.Environment["KAFKA_ADVERTISED_LISTENERS"], ",") {
			if _, addr, ok := strings.Cut(strings.TrimSpace(l), "://"); ok {
				advertised[addr] = true
			}
		}
		if len(advertised) == 0 {
			bad("kafka: KAFKA_ADVERTISED_LISTENERS names no NAME://HOST:PORT listener")
		}
		if !strings.EqualFold(kafka.Environment["KAFKA_AUTO_CREATE_TOPICS_ENABLE"], "true") {
			bad("kafka: KAFKA_AUTO_CREATE_TOPICS_ENABLE is not true: the first record for a new topic would stop `outboxd run`")
		}
	}

	ran := map[string]bool{}
	for _, name := range sortedKeys(f.Services) {
		svc := f.Services[name]
		env := map[string]string{}
		for k, v := range svc.Environment {
			iv, err := interpolate(v)
			if err != nil {
				bad("%s: %s: %v", name, k, err)
			}
			env[k] = iv
		}

		for _, dep := range sortedKeys(svc.DependsOn) {
			d, ok := f.Services[dep]
			switch cond := svc.DependsOn[dep]; {
			case !ok:
				bad("%s: depends on unknown service %q", name, dep)
			case cond == "service_healthy":
				if d.Healthcheck == nil || d.Healthcheck.Disable || len(d.Healthcheck.Test) == 0 {
					bad("%s: waits for %s to be healthy, which has no healthcheck", name, dep)
				}
			case cond != "service_started" && cond != "service_completed_successfully":
				bad("%s: depends on %s with unknown condition %q", name, dep, cond)
			}
		}

		buildsOutboxd := false
		if b := svc.Build; b != nil {
			if (b.Context == "." || b.Context == "./") && (b.Dockerfile == "" || b.Dockerfile == "Dockerfile") {
				target := b.Target
				if target == "" {
					target = finalStage
				}
				if !slices.ContainsFunc(stages, func(s dockerStage) bool { return s.name == target }) {
					bad("%s: builds target %q, which the Dockerfile has no stage for", name, b.Target)
				}
				buildsOutboxd = target == finalStage
			} else {
				notes = append(notes, fmt.Sprintf("%s: builds from %s/%s, not checked", name, b.Context, b.Dockerfile))
			}
		}

		// Which outboxd command the service runs, if any: its command, or
		// the image's CMD (run) when it builds the outboxd image.
		cmd := ""
		if len(svc.Command) > 0 {
			cmd = svc.Command[0]
		} else if buildsOutboxd {
			cmd = "run"
		}
		if _, ok := outboxdCommands[cmd]; ok {
			ran[cmd] = true
			p, n := checkOutboxdEnv(name, cmd, env)
			problems, notes = append(problems, p...), append(notes, n...)
		} else {
			if buildsOutboxd {
				bad("%s: runs `outboxd %s`, whose flags this test does not know", name, cmd)
			}
			for _, k := range sortedKeys(env) {
				if strings.HasPrefix(k, "OUTBOXD_") {
					bad("%s: sets %s but runs no outboxd command", name, k)
				}
			}
		}

		for _, k := range []string{"OUTBOXD_BROKERS", "CONSUMER_BROKERS"} {
			v, ok := env[k]
			if !ok {
				continue
			}
			for _, b := range strings.Split(v, ",") {
				b = strings.TrimSpace(b)
				host, _, _ := strings.Cut(b, ":")
				if !advertised[b] {
					bad("%s: %s: %q is not a listener the kafka service advertises (%s)", name, k, b, strings.Join(sortedKeys(advertised), ", "))
				} else if _, ok := f.Services[host]; !ok {
					bad("%s: %s: %q is not reachable from the compose network (%q is not a service)", name, k, b, host)
				}
			}
		}
		if v, ok := env["OUTBOXD_DATABASE_URL"]; ok {
			u, err := url.Parse(v)
			if err != nil || u.Scheme != "postgres" && u.Scheme != "postgresql" {
				bad("%s: OUTBOXD_DATABASE_URL is not a postgres:// URL", name)
			} else {
				pass, _ := u.User.Password()
				problems = append(problems, checkDatabase(f, name+": OUTBOXD_DATABASE_URL", u.Hostname(), u.Port(), u.User.Username(), pass, strings.TrimPrefix(u.Path, "/"))...)
			}
		}
		if host, ok := env["PGHOST"]; ok {
			problems = append(problems, checkDatabase(f, name+": PG* variables", host, env["PGPORT"], env["PGUSER"], env["PGPASSWORD"], env["PGDATABASE"])...)
		}
	}
	for _, cmd := range sortedKeys(outboxdCommands) {
		if !ran[cmd] {
			bad("no service runs `outboxd %s`", cmd)
		}
	}
	return problems, notes
}

// checkOutboxdEnv checks a service's OUTBOXD_* variables against the flags
// of the outboxd command it runs, and that the command accepts their values.
func checkOutboxdEnv(service, cmd string, env map[string]string) (problems, notes []string) {
	cfg, fs := outboxdCommands[cmd]()
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[config.EnvName(f.Name)] = true })
	use := map[string]string{}
	for _, k := range sortedKeys(env) {
		if !strings.HasPrefix(k, "OUTBOXD_") {
			continue
		}
		switch {
		case known[k]:
			use[k] = env[k]
		case slices.ContainsFunc(pendingFlags[cmd], func(f string) bool { return config.EnvName(f) == k }):
			notes = append(notes, fmt.Sprintf("%s: %s not checked: its flag is not registered for `outboxd %s` yet", service, k, cmd))
		default:
			problems = append(problems, fmt.Sprintf("%s: %s is not the variable of any flag of `outboxd %s` (those are %s)", service, k, cmd, strings.Join(sortedKeys(known), ", ")))
		}
	}
	if err := config.Parse(fs, nil, func(k string) string { return use[k] }); err != nil {
		problems = append(problems, fmt.Sprintf("%s: `outboxd %s` does not parse its environment: %v", service, cmd, err))
	} else if err := cfg.Validate(fs); err != nil {
		problems = append(problems, fmt.Sprintf("%s: `outboxd %s` rejects its environment:\n%v", service, cmd, err))
	}
	return problems, notes
}

// checkDatabase checks that a client's connection settings reach the
// PostgreSQL service with the credentials that service was created with.
func checkDatabase(f composeFile, what, host, port, user, password, db string) []string {
	pg, ok := f.Services[host]
	if !ok || !strings.HasPrefix(pg.Image, "postgres") || len(pg.Command) == 0 || pg.Command[0] != "postgres" {
		return []string{fmt.Sprintf("%s: host %q is not the PostgreSQL service", what, host)}
	}
	wantUser := cmp(pg.Environment["POSTGRES_USER"], "postgres")
	want := map[string][2]string{
		"port":     {cmp(port, "5432"), "5432"},
		"user":     {user, wantUser},
		"password": {password, pg.Environment["POSTGRES_PASSWORD"]},
		"database": {cmp(db, user), cmp(pg.Environment["POSTGRES_DB"], wantUser)},
	}
	var problems []string
	for _, k := range sortedKeys(want) {
		if got := want[k]; got[0] != got[1] {
			problems = append(problems, fmt.Sprintf("%s: %s is %q, the %s service has %q", what, k, got[0], host, got[1]))
		}
	}
	return problems
}

// cmp returns v, or def when v is empty.
func cmp(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

type dockerInstr struct {
	cmd  string // upper case
	args string
}

type dockerStage struct {
	name, base string
	instrs     []dockerInstr
}

// parseDockerfile splits a Dockerfile into stages of instructions, joining
// continuation lines and dropping comments.
func parseDockerfile(text string) []dockerStage {
	var stages []dockerStage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		if cmd == "FROM" {
			var fields []string
			for _, f := range strings.Fields(args) {
				if !strings.HasPrefix(f, "--") {
					fields = append(fields, f)
				}
			}
			st := dockerStage{name: fmt.Sprint(len(stages))}
			if len(fields) > 0 {
				st.base = fields[0]
			}
			if len(fields) >= 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			stages = append(stages, st)
			return
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, dockerInstr{cmd, args})
		}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return stages
}

// dockerBinaries are the programs the Dockerfile builds, each into a stage of
// its own ("" is the final stage).
var dockerBinaries = []struct{ pkg, stage, entrypoint string }{
	{"./cmd/outboxd", "", "/outboxd"},
	{"./examples/consumer", "example-consumer", "/example-consumer"},
}

// checkDockerfile returns what is wrong with the Dockerfile.
func checkDockerfile(text string) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	stages := parseDockerfile(text)
	if len(stages) == 0 {
		return []string{"the Dockerfile has no FROM"}
	}
	byName := map[string]dockerStage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	for _, b := range dockerBinaries {
		// The RUN that builds the package, and where it writes the binary.
		var builder, out string
		for _, s := range stages {
			for _, in := range s.instrs {
				if in.cmd == "RUN" && strings.Contains(in.args, "go build") && slices.Contains(strings.Fields(in.args), b.pkg) {
					builder = s.name
					if !regexp.MustCompile(`(^|[\s;&])CGO_ENABLED=0\s`).MatchString(in.args) {
						bad("%s is not built with CGO_ENABLED=0 (a static binary, for distroless/static): %s", b.pkg, in.args)
					}
					if m := regexp.MustCompile(`\s-o\s+(\S+)`).FindStringSubmatch(in.args); m != nil {
						out = m[1]
					}
					if b.pkg == "./cmd/outboxd" && !strings.Contains(in.args, "-X main.version=") {
						bad("%s is built without -X main.version=: `outboxd version` would say dev (.dockerignore leaves out .git, so the build records no version)", b.pkg)
					}
				}
			}
		}
		if builder == "" || out == "" {
			bad("no RUN go build -o PATH ... %s", b.pkg)
			continue
		}
		st := stages[len(stages)-1]
		if b.stage != "" {
			var ok bool
			if st, ok = byName[b.stage]; !ok {
				bad("no stage %q for %s", b.stage, b.pkg)
				continue
			}
		}
		copied := slices.ContainsFunc(st.instrs, func(in dockerInstr) bool {
			f := strings.Fields(in.args)
			return in.cmd == "COPY" && slices.Contains(f, "--from="+builder) && slices.Contains(f, out) && f[len(f)-1] == b.entrypoint
		})
		if !copied {
			bad("stage %s does not COPY --from=%s %s %s", st.name, builder, out, b.entrypoint)
		}
		if !slices.ContainsFunc(st.instrs, func(in dockerInstr) bool {
			return in.cmd == "ENTRYPOINT" && strings.Contains(in.args, `"`+b.entrypoint+`"`)
		}) {
			bad("stage %s has no ENTRYPOINT [%q]", st.name, b.entrypoint)
		}
		if user, ok := stageUser(byName, st); !ok {
			bad("stage %s runs as root: its last USER is %q and its base %s is not a nonroot image", st.name, user, st.base)
		}
	}
	final := stages[len(stages)-1]
	if !slices.ContainsFunc(final.instrs, func(in dockerInstr) bool { return in.cmd == "CMD" && strings.Contains(in.args, `"run"`) }) {
		bad(`the final stage has no CMD ["run"] (docker-compose.yml and the README rely on it)`)
	}
	return problems
}

// stageUser reports the user a stage runs as and whether it is not root: a
// numeric non-zero USER or USER nonroot, or without USER a base image (or
// stage) that is nonroot.
func stageUser(byName map[string]dockerStage, st dockerStage) (string, bool) {
	for seen := 0; seen <= len(byName); seen++ {
		for i := len(st.instrs) - 1; i >= 0; i-- {
			if in := st.instrs[i]; in.cmd == "USER" {
				user, _, _ := strings.Cut(in.args, ":")
				uid, err := strconv.Atoi(user)
				return in.args, err == nil && uid > 0 || user == "nonroot"
			}
		}
		parent, ok := byName[st.base]
		if !ok {
			return "", strings.Contains(st.base, "nonroot")
		}
		st = parent
	}
	return "", false
}

// dockerignored reports whether .dockerignore patterns leave rel (a
// slash-separated path in the context) out of the build context.
func dockerignored(patterns []string, rel string) bool {
	ignored := false
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		exclude := !strings.HasPrefix(p, "!")
		p = path.Clean(strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/"))
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch c := p[i]; {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("(/.*)?$") // a directory takes what is under it
		if regexp.MustCompile(re.String()).MatchString(rel) {
			ignored = exclude
		}
	}
	return ignored
}

// checkDockerignore returns what is wrong with .dockerignore: a file the Go
// build reads (go.mod, go.sum, non-test .go files, //go:embed files) left out
// of the context, or .git and bin/ sent into it.
func checkDockerignore(dockerignore, root string) []string {
	patterns := strings.Split(dockerignore, "\n")
	var problems []string
	var needed []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "go.mod" || rel == "go.sum" || strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			needed = append(needed, rel)
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(src), "\n") {
				if pats, ok := strings.CutPrefix(line, "//go:embed "); ok {
					for _, pat := range strings.Fields(pats) {
						matches, _ := filepath.Glob(filepath.Join(filepath.Dir(p), pat))
						if len(matches) == 0 {
							problems = append(problems, fmt.Sprintf("%s: //go:embed %s matches nothing", rel, pat))
						}
						for _, m := range matches {
							mrel, _ := filepath.Rel(root, m)
							needed = append(needed, filepath.ToSlash(mrel))
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return []string{err.Error()}
	}
	if !slices.Contains(needed, "go.mod") || !slices.Contains(needed, "cmd/outboxd/main.go") {
		problems = append(problems, fmt.Sprintf("walking %s found no go.mod or cmd/outboxd/main.go", root))
	}
	for _, n := range needed {
		if dockerignored(patterns, n) {
			problems = append(problems, fmt.Sprintf(".dockerignore leaves %s out of the build context, and the build reads it", n))
		}
	}
	for _, n := range []string{".git/HEAD", "bin/outboxd"} {
		if !dockerignored(patterns, n) {
			problems = append(problems, fmt.Sprintf(".dockerignore sends %s into the build context", n))
		}
	}
	return problems
}

func readRepoFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	problems, notes := checkCompose(readRepoFile(t, composePath), readRepoFile(t, dockerfilePath))
	for _, n := range notes {
		t.Log(n)
	}
	for _, p := range problems {
		t.Errorf("docker-compose.yml: %s", p)
	}
}

// replaceOnce replaces old, which must occur in s exactly once.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("the mutation's text occurs %d times, want once: %q", n, old)
	}
	return strings.Replace(s, old, new, 1)
}

// TestComposeCheckCatchesMistakes breaks copies of docker-compose.yml and
// expects the check to name each mistake.
func TestComposeCheckCatchesMistakes(t *testing.T) {
	t.Parallel()
	compose := string(readRepoFile(t, composePath))
	dockerfile := readRepoFile(t, dockerfilePath)
	const brokers = "      OUTBOXD_BROKERS: kafka:9092\n"
	const migrateEnv = "    command: [\"migrate\"]\n    environment:\n"
	for _, tc := range []struct {
		name, old, new string
		want           string // a problem containing this
	}{
		{"unknown variable", brokers, brokers + "      OUTBOXD_FOO: bar\n", "OUTBOXD_FOO is not the variable of any flag of `outboxd run`"},
		{"flag of another command", brokers, brokers + "      OUTBOXD_OWN_TABLE: \"true\"\n", "outboxd: OUTBOXD_OWN_TABLE is not the variable of any flag of `outboxd run`"},
		{"run-only flag on migrate", migrateEnv, migrateEnv + brokers, "outboxd-migrate: OUTBOXD_BROKERS is not the variable of any flag of `outboxd migrate`"},
		{"invalid value", "OUTBOXD_ALLOW_AUTO_TOPIC_CREATION: \"true\"", "OUTBOXD_ALLOW_AUTO_TOPIC_CREATION: \"yes\"", "OUTBOXD_ALLOW_AUTO_TOPIC_CREATION"},
		{"value the command rejects", brokers + "      OUTBOXD_ALLOW", brokers + "      OUTBOXD_SLOT: Outboxd\n      OUTBOXD_ALLOW", "--slot (OUTBOXD_SLOT)"},
		{"unchecked interpolation", brokers, brokers + "      OUTBOXD_LOG_LEVEL: ${LOG_LEVEL}\n", `outboxd: OUTBOXD_LOG_LEVEL: variable reference in "${LOG_LEVEL}" cannot be checked`},
		{"interpolated default checked", brokers, brokers + "      OUTBOXD_LOG_LEVEL: ${LOG_LEVEL:-loud}\n", `--log-level (OUTBOXD_LOG_LEVEL): "loud"`},
		{"broker not advertised", "OUTBOXD_BROKERS: kafka:9092", "OUTBOXD_BROKERS: kafka:29092", `"kafka:29092" is not a listener the kafka service advertises`},
		{"host listener used inside compose", "OUTBOXD_BROKERS: kafka:9092", "OUTBOXD_BROKERS: localhost:9094", `"localhost:9094" is not reachable from the compose network`},
		{"consumer broker not advertised", "CONSUMER_BROKERS: kafka:9092", "CONSUMER_BROKERS: broker:9092", "example-consumer: CONSUMER_BROKERS"},
		{"no logical WAL", `"-c", "wal_level=logical", `, "", "does not set wal_level=logical"},
		{"missing service", "\n  example-consumer:\n", "\n  consumer:\n", `no service "example-consumer"`},
		{"wrong database password", "postgres://outboxd:outboxd@postgres:5432/app?sslmode=disable\n      OUTBOXD_LOG_FORMAT", "postgres://outboxd:secret@postgres:5432/app?sslmode=disable\n      OUTBOXD_LOG_FORMAT", `outboxd-migrate: OUTBOXD_DATABASE_URL: password is "secret"`},
		{"writer to another database", "PGDATABASE: app", "PGDATABASE: postgres", "writer: PG* variables: database"},
		{"healthy dependency without healthcheck", "      test: [\"CMD\", \"pg_isready\"", "      disable: true\n      test: [\"CMD\", \"pg_isready\"", "waits for postgres to be healthy, which has no healthcheck"},
		{"unknown build target", "target: example-consumer", "target: consumer", `builds target "consumer"`},
		{"no topic auto-creation", `KAFKA_AUTO_CREATE_TOPICS_ENABLE: "true"`, `KAFKA_AUTO_CREATE_TOPICS_ENABLE: "false"`, "KAFKA_AUTO_CREATE_TOPICS_ENABLE is not true"},
		{"outboxd variable on a non-outboxd service", "PGHOST: postgres\n", "PGHOST: postgres\n      OUTBOXD_DATABASE_URL: postgres://x@y/z\n", "writer: sets OUTBOXD_DATABASE_URL but runs no outboxd command"},
		{"not YAML", "services:\n", "services:\n\t-", "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			problems, _ := checkCompose([]byte(replaceOnce(t, compose, tc.old, tc.new)), dockerfile)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("no problem mentions %q; problems:\n%s", tc.want, strings.Join(problems, "\n"))
			}
		})
	}
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	for _, p := range checkDockerfile(string(readRepoFile(t, dockerfilePath))) {
		t.Errorf("Dockerfile: %s", p)
	}
	for _, p := range checkDockerignore(string(readRepoFile(t, dockerignorePath)), repoRoot) {
		t.Errorf("%s", p)
	}
}

// TestDockerfileCheckCatchesMistakes breaks copies of the Dockerfile and
// .dockerignore and expects the checks to name each mistake.
func TestDockerfileCheckCatchesMistakes(t *testing.T) {
	t.Parallel()
	dockerfile := string(readRepoFile(t, dockerfilePath))
	dockerignore := string(readRepoFile(t, dockerignorePath))
	for _, tc := range []struct {
		name, old, new string
		want           string
	}{
		{"root user last", `CMD ["run"]`, "USER root\nCMD [\"run\"]", "stage outboxd runs as root"},
		{"uid 0", `CMD ["run"]`, "USER 0:0\nCMD [\"run\"]", "stage outboxd runs as root"},
		{"root base, no USER", "FROM gcr.io/distroless/static-debian12:nonroot AS outboxd\nCOPY --from=build-outboxd /out/outboxd /outboxd\nUSER 65532:65532\n", "FROM gcr.io/distroless/static-debian12 AS outboxd\nCOPY --from=build-outboxd /out/outboxd /outboxd\n", "stage outboxd runs as root"},
		{"cgo", "CGO_ENABLED=0 go build -trimpath -ldflags \"-s -w -X", "go build -trimpath -ldflags \"-s -w -X", "./cmd/outboxd is not built with CGO_ENABLED=0"},
		{"consumer cgo", "CGO_ENABLED=0 go build -trimpath -ldflags \"-s -w\" -o /out/example-consumer", "go build -trimpath -ldflags \"-s -w\" -o /out/example-consumer", "./examples/consumer is not built with CGO_ENABLED=0"},
		{"no version stamp", "-X main.version=${VERSION}", "", "without -X main.version="},
		{"binary not copied", "COPY --from=build-outboxd /out/outboxd /outboxd", "COPY --from=build-outboxd /out/outboxd2 /outboxd", "does not COPY --from=build-outboxd /out/outboxd /outboxd"},
		{"no entrypoint", `ENTRYPOINT ["/outboxd"]`, `ENTRYPOINT ["/bin/outboxd"]`, `has no ENTRYPOINT ["/outboxd"]`},
		{"no default command", `CMD ["run"]`, "", `no CMD ["run"]`},
		{"outboxd not built", "./cmd/outboxd\n", "./harness/cmd/outboxd-chaos\n", "no RUN go build -o PATH ... ./cmd/outboxd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			problems := checkDockerfile(replaceOnce(t, dockerfile, tc.old, tc.new))
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("no problem mentions %q; problems:\n%s", tc.want, strings.Join(problems, "\n"))
			}
		})
	}
	for _, tc := range []struct{ name, add, want string }{
		{"go sources", "**/*.go", ".dockerignore leaves cmd/outboxd/main.go out"},
		{"embedded migrations", "migrations/sql/", ".dockerignore leaves migrations/sql/0001_outbox_table.sql out"},
		{"go.sum", "go.*", ".dockerignore leaves go.sum out"},
		{"re-included bin", "!bin/", ".dockerignore sends bin/outboxd into the build context"},
	} {
		t.Run(".dockerignore "+tc.name, func(t *testing.T) {
			t.Parallel()
			problems := checkDockerignore(dockerignore+tc.add+"\n", repoRoot)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("no problem mentions %q; problems:\n%s", tc.want, strings.Join(problems, "\n"))
			}
		})
	}
}
