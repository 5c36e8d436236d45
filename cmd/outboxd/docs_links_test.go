package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDocsLinksResolve fails when a relative link of the README, the
// project's own pages or docs/*.md points at a file that is not there, or
// at a heading its page does not have. External links are not followed.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	pages := []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md"}
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, err := filepath.Rel(repoRoot, d)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, rel)
	}
	for _, page := range pages {
		text, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Errorf("reading %s: %v", page, err)
			continue
		}
		for _, link := range markdownLinks(string(text)) {
			if problem := checkLink(page, link); problem != "" {
				t.Errorf("%s: link %q: %s", page, link, problem)
			}
		}
	}
}

func TestCheckLink(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		page, link string
		ok         bool
	}{
		{"README.md", "docs/operating.md", true},
		{"README.md", "docs/operating.md#least-privilege", true},
		{"README.md", "#quick-start-with-your-own-database", true},
		{"README.md", "docs/bench/README.md", true},
		{"README.md", "idempotent/doc.go", true},
		{"docs/layouts.md", "../idempotent/doc.go", true},
		{"README.md", "https://example.com/nowhere", true},
		{"README.md", "docs/nowhere.md", false},
		{"README.md", "docs/operating.md#nowhere", false},
		{"README.md", "#nowhere", false},
	} {
		if got := checkLink(tc.page, tc.link) == ""; got != tc.ok {
			t.Errorf("checkLink(%s, %s) ok = %v, want %v", tc.page, tc.link, got, tc.ok)
		}
	}
}

var (
	linkRE  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fenceRE = regexp.MustCompile("(?ms)^```.*?^```")
)

// markdownLinks is every [text](target) of a page outside code blocks.
func markdownLinks(text string) []string {
	var links []string
	for _, m := range linkRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		links = append(links, m[1])
	}
	return links
}

// checkLink says what is wrong with a link of page, "" when nothing.
func checkLink(page, link string) string {
	if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
		return ""
	}
	target, anchor, _ := strings.Cut(link, "#")
	path := filepath.Join(repoRoot, filepath.Dir(page), target)
	if target == "" {
		path = filepath.Join(repoRoot, page)
	}
	info, err := os.Stat(path)
	if err != nil {
		return "no such file"
	}
	if anchor == "" {
		return ""
	}
	if info.IsDir() || !strings.HasSuffix(path, ".md") {
		return "an anchor into a file that is not Markdown"
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	for _, a := range headingAnchors(string(text)) {
		if a == anchor {
			return ""
		}
	}
	return "no heading with anchor #" + anchor
}

// headingAnchors are the anchors GitHub gives a page's headings: lower
// case, punctuation but - and _ dropped, spaces as -, a repeated anchor
// suffixed -1, -2, ...
func headingAnchors(text string) []string {
	seen := map[string]int{}
	var anchors []string
	for _, line := range strings.Split(fenceRE.ReplaceAllString(text, ""), "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors = append(anchors, a+"-"+strconv.Itoa(n))
		} else {
			anchors = append(anchors, a)
		}
		seen[a]++
	}
	return anchors
}

// Issue 49, item 31: the README's table of contents listed 9 of its 11
// sections. It lists every section (## heading), in order.
func TestReadmeContentsListEverySection(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var sections []string
	for _, line := range strings.Split(fenceRE.ReplaceAllString(string(text), ""), "\n") {
		if title, ok := strings.CutPrefix(line, "## "); ok {
			sections = append(sections, headingAnchors("# " + title)[0])
		}
	}
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^\d+\. \[[^\]]+\]\(#([^)]+)\)`).FindAllStringSubmatch(string(text), -1) {
		listed = append(listed, m[1])
	}
	if strings.Join(listed, " ") != strings.Join(sections, " ") {
		t.Errorf("the README's contents list\n  %v\nits sections are\n  %v", listed, sections)
	}
}
