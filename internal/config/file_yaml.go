package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// yamlErrorLine is the line yaml.v3 puts in a syntax error's text.
var yamlErrorLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError names YAML that does not parse by the line where it stops
// parsing. yaml.v3 names the line where the construct around the fault
// begins (an indentation fault on line 18 of a pipeline is reported at
// the pipelines: line), and its errors carry no other position: the line
// is the first of the shortest beginning of the file that no longer
// parses, reading back from the end (a beginning that ends inside a
// quoted or flow value does not parse either, and is passed over).
func (r *fileReader) syntaxError(data []byte, err error) error {
	m := yamlErrorLine.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("%s: %w", r.path, err)
	}
	context, _ := strconv.Atoi(m[1])
	lines := bytes.SplitAfter(data, []byte("\n"))
	at := 0 // lines that parse, from the top
	for n := len(lines) - 1; n > 0; n-- {
		if parses(bytes.Join(lines[:n], nil)) {
			at = n
			break
		}
	}
	if line := at + 1; line != context && line <= len(lines) {
		return fmt.Errorf("%s:%d: %s (in what begins on line %d)", r.path, line, m[2], context)
	}
	return fmt.Errorf("%s:%d: %s", r.path, context, m[2])
}

// parses reports whether every YAML document of data parses.
func parses(data []byte) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		switch err := dec.Decode(&n); {
		case errors.Is(err, io.EOF):
			return true
		case err != nil:
			return false
		}
	}
}

// entry is one setting of a pipelines file: a key (a flag's name), its
// value as the flag takes it (${VAR} expanded, a list joined with
// commas), and the line of the key.
type entry struct {
	key, value string
	line       int
}

// section is a mapping of a pipelines file: its top level, or one
// pipeline (then with its name).
type section struct {
	name    string // a pipeline's name; "" when missing or invalid
	label   string // how problems name it: `pipeline "orders"`
	line    int
	entries []entry
	refused []string // keys whose value was refused (and reported)
	broken  bool     // not a mapping (reported): no pipeline to build
}

// fileReader turns a pipelines file's YAML into sections, collecting a
// problem, named by file and line, for everything it refuses.
type fileReader struct {
	path   string
	known  map[string]bool // the keys: run's flags
	getenv func(string) string
	errs   []error
}

func (r *fileReader) problem(line int, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s:%d: %s", r.path, line, fmt.Sprintf(format, args...)))
}

// read parses data into the top level's settings and the pipelines. An
// error is returned when there is nothing to read settings from (YAML
// that does not parse, or no mapping at the top); every other problem is
// collected in r.errs.
func (r *fileReader) read(data []byte) (top section, pipelines []section, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return section{}, nil, fmt.Errorf("%s: the file is empty: want settings and a pipelines list", r.path)
		}
		return section{}, nil, r.syntaxError(data, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return section{}, nil, fmt.Errorf("%s:%d: a second YAML document: a pipelines file holds one", r.path, more.Line)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return section{}, nil, fmt.Errorf("%s:%d: want a mapping of settings with a pipelines list, not %s", r.path, root.Line, kindName(root))
	}
	top = section{label: "the top level", line: root.Line}
	var list *yaml.Node
	for _, kv := range r.pairs(root, "") {
		k, v := kv[0], kv[1]
		switch {
		case k.Value == "pipelines":
			list = v
		case k.Value == "name":
			r.problem(k.Line, "name: a pipeline's name goes in its entry of the pipelines list")
		case r.known[k.Value] || isProcess(k.Value):
			if e, ok := r.entry(k, v, ""); ok {
				top.entries = append(top.entries, e)
			} else {
				top.refused = append(top.refused, k.Value)
			}
		default:
			r.unknown(k, "")
		}
	}
	switch {
	case list == nil:
		r.problem(root.Line, "no pipelines: list them under pipelines:")
	case list.Kind != yaml.SequenceNode:
		r.problem(list.Line, "pipelines: want a list of pipelines, not %s", kindName(list))
	case len(list.Content) == 0:
		r.problem(list.Line, "pipelines: the list is empty")
	}
	if list == nil || list.Kind != yaml.SequenceNode {
		return top, nil, nil
	}
	names := map[string]int{} // the line of each name's first pipeline
	for i, item := range list.Content {
		pipelines = append(pipelines, r.pipeline(i, resolve(item), names))
	}
	return top, pipelines, nil
}

// pipelineName is what a pipeline's name may be: it names the pipeline in
// log lines and is meant as a Prometheus label value, so it keeps to
// characters safe in both.
var pipelineName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// pipeline reads the i-th entry of the pipelines list; names holds the
// names taken before it.
func (r *fileReader) pipeline(i int, n *yaml.Node, names map[string]int) section {
	p := section{label: fmt.Sprintf("pipeline %d (line %d)", i+1, n.Line), line: n.Line}
	if n.Kind != yaml.MappingNode {
		r.problem(n.Line, "%s: want a mapping of settings with a name, not %s", p.label, kindName(n))
		p.broken = true
		return p
	}
	unnamed := p.label
	if name := r.peekName(n); name != "" {
		p.name, p.label = name, "pipeline "+strconv.Quote(name)
		if first, taken := names[name]; taken {
			r.problem(n.Line, "pipeline name %q is taken by the pipeline at line %d", name, first)
			p.label += fmt.Sprintf(" (line %d)", n.Line)
		} else {
			names[name] = n.Line
		}
	}
	named := false
	var settings [][2]*yaml.Node
	for _, kv := range r.pairs(n, p.label) {
		if kv[0].Value != "name" {
			settings = append(settings, kv)
			continue
		}
		named = true
		if e, ok := r.entry(kv[0], kv[1], unnamed); ok && !pipelineName.MatchString(e.value) {
			r.problem(e.line, "%s: name %q: want 1 to 63 letters, digits, '.', '_' or '-', the first a letter or digit", unnamed, e.value)
		}
	}
	if !named {
		r.problem(n.Line, "%s has no name: give it one with name:", p.label)
	}
	for _, kv := range settings {
		k, v := kv[0], kv[1]
		switch {
		case isProcess(k.Value):
			r.problem(k.Line, "%s: %s is a process setting; set it at the top level of the file", p.label, k.Value)
		case r.known[k.Value]:
			if e, ok := r.entry(k, v, p.label); ok {
				p.entries = append(p.entries, e)
			} else {
				p.refused = append(p.refused, k.Value)
			}
		default:
			r.unknown(k, p.label)
		}
	}
	return p
}

// peekName is the valid name of pipeline n, or "" (the problem is
// reported where the name is read).
func (r *fileReader) peekName(n *yaml.Node) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], resolve(n.Content[i+1]); k.Kind == yaml.ScalarNode && k.Value == "name" {
			if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
				return ""
			}
			name, err := expand(v.Value, r.getenv)
			if err != nil || !pipelineName.MatchString(name) {
				return ""
			}
			return name
		}
	}
	return ""
}

// pairs is the key and value nodes of mapping n, each key a plain name
// given once; a key that is not, or a repeated one, is a problem and
// left out.
func (r *fileReader) pairs(n *yaml.Node, in string) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode || k.Tag == "!!null":
			r.problem(k.Line, "%swant a setting's name as a key, not %s", prefix(in), kindName(k))
		case k.Tag == "!!merge":
			r.problem(k.Line, "%s<<: merge keys are not supported: give settings shared by every pipeline at the top level", prefix(in))
		case seen[k.Value] > 0:
			r.problem(k.Line, "%sduplicate key %q (first at line %d)", prefix(in), k.Value, seen[k.Value])
		default:
			seen[k.Value] = k.Line
			out = append(out, [2]*yaml.Node{k, v})
		}
	}
	return out
}

// entry renders a setting's value as its flag takes it: a scalar's text,
// or a list's items joined with commas, ${VAR} expanded in each.
func (r *fileReader) entry(k, v *yaml.Node, in string) (entry, bool) {
	bad := func(n *yaml.Node, format string, args ...any) (entry, bool) {
		r.problem(n.Line, "%s%s: %s", prefix(in), k.Value, fmt.Sprintf(format, args...))
		return entry{}, false
	}
	var items []*yaml.Node
	switch v.Kind {
	case yaml.ScalarNode:
		items = []*yaml.Node{v}
	case yaml.SequenceNode:
		items = v.Content
	default:
		return bad(v, "want a value or a list of values, not %s", kindName(v))
	}
	var vals []string
	for _, it := range items {
		it = resolve(it)
		if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
			what := "want a value"
			if v.Kind == yaml.SequenceNode {
				what = "want each item of the list a value"
			}
			return bad(it, "%s, not %s", what, kindName(it))
		}
		s, err := expand(it.Value, r.getenv)
		if err != nil {
			return bad(it, "%v", err)
		}
		vals = append(vals, s)
	}
	return entry{key: k.Value, value: strings.Join(vals, ","), line: k.Line}, true
}

// unknown reports a key that is no setting, suggesting the nearest one.
func (r *fileReader) unknown(k *yaml.Node, in string) {
	if near := nearest(k.Value, r.known); near != "" {
		r.problem(k.Line, "%sunknown key %q (did you mean %s?)", prefix(in), k.Value, near)
		return
	}
	r.problem(k.Line, "%sunknown key %q: the keys are run's flags (outboxd run --help)", prefix(in), k.Value)
}

func prefix(in string) string {
	if in == "" {
		return ""
	}
	return in + ": "
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// kindName says what a node is, for a problem.
func kindName(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "null (no value)"
	case n.Kind == yaml.ScalarNode:
		return "a single value" // not quoted: it may be a secret (a secret's file given as --config)
	}
	return "this"
}

// nearest is the known key closest to key, when a slip of at most two
// letters away ("" otherwise).
func nearest(key string, known map[string]bool) string {
	best, bestDist := "", 3
	key = strings.TrimLeft(key, "-")
	for k := range known {
		if d := editDistance(key, k); d < bestDist || (d == bestDist && best != "" && k < best) {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
