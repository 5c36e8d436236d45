// Command corenames prints, on one line and separated by spaces, the names
// of the core integration tests in the package directories it is given:
// the Test functions of their *_test.go files whose body calls
// testenv.Core (package harness/testenv). The Makefile runs those tests
// again against every other PostgreSQL version of the test bed, so the
// list follows the tests themselves and a new core test cannot be
// forgotten.
//
// What counts, and why:
//   - A call anywhere in the test function's body, a subtest's or a
//     closure's included: `go test -run` selects top-level tests, and
//     selecting the test runs every subtest with it.
//   - Only a call through the package's import name in that file (testenv,
//     or the name it is imported as): a helper that calls Core does not
//     mark the tests that call the helper, so the mark stays visible in
//     the test itself.
//   - Only functions go test runs as tests: no receiver, a name that is
//     Test or Test followed by anything but a lower-case letter. Build
//     constraints are not looked at: a test a platform leaves out is named
//     anyway, and -run just finds nothing there.
//
// It parses the files (go/parser), with no type checking, so it works
// while the packages themselves do not compile. It fails, printing
// nothing, when a directory cannot be read, a file does not parse, or no
// test at all is marked: a run of no core tests must not pass for one that
// ran them.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// testenvPath is the import path of the package whose Core marks a test.
const testenvPath = "github.com/outboxd/outboxd/harness/testenv"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: corenames DIR...")
		os.Exit(2)
	}
	names, err := find(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "corenames:", err)
		os.Exit(1)
	}
	fmt.Println(strings.Join(names, " "))
}

// find returns the marked tests of the *_test.go files in dirs, sorted,
// each name once.
func find(dirs []string) ([]string, error) {
	fset := token.NewFileSet()
	var names []string
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("listing the tests of %s: %w", dir, err)
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			path := filepath.Join(dir, e.Name())
			found, err := marked(fset, path, nil)
			if err != nil {
				return nil, err
			}
			names = append(names, found...)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no test in %s calls testenv.Core", strings.Join(dirs, " "))
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// marked returns the names of the tests in one file that call
// testenv.Core; src is the file's text, or nil to read path.
func marked(fset *token.FileSet, path string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	pkg, err := importName(f)
	if err != nil {
		return nil, fmt.Errorf("reading the imports of %s: %w", path, err)
	}
	if pkg == "" {
		return nil, nil
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Body == nil || !isTest(fn.Name.Name) {
			continue
		}
		if callsCore(fn.Body, pkg) {
			names = append(names, fn.Name.Name)
		}
	}
	return names, nil
}

// importName is the name f refers to package testenv by, "" when f does
// not import it (or imports it as _ or .: no call of it is then written
// testenv.Core).
func importName(f *ast.File) (string, error) {
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return "", fmt.Errorf("import %s: %w", imp.Path.Value, err)
		}
		if p != testenvPath {
			continue
		}
		if imp.Name == nil {
			return "testenv", nil
		}
		if imp.Name.Name == "_" || imp.Name.Name == "." {
			return "", nil
		}
		return imp.Name.Name, nil
	}
	return "", nil
}

// callsCore reports whether body holds a call pkg.Core(...), at any depth.
func callsCore(body *ast.BlockStmt, pkg string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if found {
			return false
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Core" {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == pkg {
			found = true
		}
		return !found
	})
	return found
}

// isTest reports whether go test runs a function of this name as a test:
// Test, or Test followed by anything but a lower-case letter.
func isTest(name string) bool {
	rest, ok := strings.CutPrefix(name, "Test")
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return !unicode.IsLower(r)
}
