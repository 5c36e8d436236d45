// Command testsummary reads `go test -json` from stdin and prints a compact
// report: the output of every failed test, the name and reason of every
// skipped test (so a run that skipped its integration tests is visible), the
// lines a passing test logged with "measured: ", one
// line per package, and a closing "N passed, N failed, N skipped" line. It
// exits non-zero when any test or package failed or the stream was empty.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	outputs := map[string]*strings.Builder{} // package/test → output
	var passed, failed, skipped []string
	var pkgFailed []string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			// Build errors and other non-JSON lines go straight through.
			fmt.Fprintln(out, string(line))
			continue
		}
		key := ev.Package + " " + ev.Test
		switch ev.Action {
		case "output":
			b := outputs[key]
			if b == nil {
				b = &strings.Builder{}
				outputs[key] = b
			}
			b.WriteString(ev.Output)
		case "pass":
			if ev.Test != "" {
				passed = append(passed, key)
				// Figures a test reports with t.Logf("measured: ...") are kept.
				if b := outputs[key]; b != nil {
					for _, l := range strings.Split(b.String(), "\n") {
						if strings.Contains(l, "measured: ") {
							fmt.Fprintf(out, "%s: %s\n", ev.Test, l[strings.Index(l, "measured: "):])
						}
					}
				}
			} else {
				fmt.Fprintf(out, "ok    %s (%.1fs)\n", ev.Package, ev.Elapsed)
			}
			delete(outputs, key)
		case "skip":
			if ev.Test != "" {
				skipped = append(skipped, key+": "+skipReason(outputs[key]))
			}
			delete(outputs, key)
		case "fail":
			if ev.Test != "" {
				failed = append(failed, key)
			} else {
				pkgFailed = append(pkgFailed, ev.Package)
			}
			fmt.Fprintf(out, "--- FAIL %s\n", key)
			if b := outputs[key]; b != nil {
				fmt.Fprint(out, b.String())
			}
			delete(outputs, key)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	sort.Strings(skipped)
	for _, s := range skipped {
		fmt.Fprintf(out, "skipped %s\n", s)
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", len(passed), len(failed), len(skipped))
	switch {
	case len(failed) > 0 || len(pkgFailed) > 0:
		return fmt.Errorf("%d tests and %d packages failed", len(failed), len(pkgFailed))
	case len(passed) == 0:
		return fmt.Errorf("no test ran")
	}
	return nil
}

func skipReason(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	var last string
	for _, l := range strings.Split(b.String(), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "=== ") && !strings.HasPrefix(l, "--- SKIP") {
			last = l
		}
	}
	return last
}
