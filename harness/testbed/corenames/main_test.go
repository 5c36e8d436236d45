package main

import (
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// header is the start of a fixture file importing testenv as it is
// usually imported.
const header = `package p_test

import (
	"testing"

	"github.com/outboxd/outboxd/harness/testenv"
)

`

// The tests of one file corenames names: the cases say what counts as
// marking a test (the package doc says why).
func TestMarked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		src     string
		want    []string
		wantErr bool
	}{
		{"a test marking itself", header + `func TestA(t *testing.T) { t.Parallel(); testenv.Core(t) }`, []string{"TestA"}, false},
		{"a test not marking itself", header + `func TestB(t *testing.T) { t.Parallel(); _ = testenv.Database(t) }`, nil, false},
		{"marked in a subtest only: counts", header + `func TestC(t *testing.T) {
	t.Run("sub", func(t *testing.T) { testenv.Core(t) })
}`, []string{"TestC"}, false},
		{"marked after other statements: counts", header + `func TestD(t *testing.T) { if true { testenv.Core(t) } }`, []string{"TestD"}, false},
		{"imported under another name", `package p
import (
	"testing"
	te "github.com/outboxd/outboxd/harness/testenv"
)
func TestE(t *testing.T) { te.Core(t) }`, []string{"TestE"}, false},
		{"another package's Core", `package p
import (
	"testing"
	"example.com/testenv"
)
func TestF(t *testing.T) { testenv.Core(t) }`, nil, false},
		{"a helper calling Core: marks neither it nor its callers", header + `func mark(t *testing.T) { testenv.Core(t) }
func TestG(t *testing.T) { mark(t) }`, nil, false},
		{"not tests: a method, a lower-case suffix, a benchmark", header + `type s struct{}
func (s) TestH(t *testing.T) { testenv.Core(t) }
func Testing(t *testing.T) { testenv.Core(t) }
func BenchmarkI(b *testing.B) { testenv.Core(nil) }`, nil, false},
		{"Test alone, and Test_ with a suffix", header + `func Test(t *testing.T) { testenv.Core(t) }
func Test_j(t *testing.T) { testenv.Core(t) }`, []string{"Test", "Test_j"}, false},
		{"several, in the file's order", header + `func TestZ(t *testing.T) { testenv.Core(t) }
func TestY(t *testing.T) {}
func TestX(t *testing.T) { testenv.Core(t) }`, []string{"TestZ", "TestX"}, false},
		{"does not parse", header + `func TestK(t *testing.T) {`, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := marked(token.NewFileSet(), "fixture_test.go", tc.src)
			if (err != nil) != tc.wantErr {
				t.Fatalf("marked = %v, %v; want an error %v", got, err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("marked = %q, want %q", got, tc.want)
			}
		})
	}
}

// What corenames prints for whole directories, and when it refuses to print
// anything rather than let make test run no core test.
func TestFind(t *testing.T) {
	t.Parallel()
	// write makes a directory of the files given, by name.
	write := func(t *testing.T, files map[string]string) string {
		t.Helper()
		dir := t.TempDir()
		for name, src := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	marking := func(name string) string { return header + "func " + name + "(t *testing.T) { testenv.Core(t) }\n" }
	tests := []struct {
		name    string
		dirs    [][]string // each directory's files, as name, source pairs; nil: a directory that does not exist
		want    []string
		wantErr bool
	}{
		{"sorted across files and directories, each name once",
			[][]string{{"a_test.go", marking("TestB"), "b_test.go", marking("TestA")}, {"c_test.go", marking("TestB")}},
			[]string{"TestA", "TestB"}, false},
		{"only _test.go files", [][]string{{"a_test.go", marking("TestA"), "b.go", marking("TestB")}}, []string{"TestA"}, false},
		{"no core test at all", [][]string{{"a_test.go", header + "func TestA(t *testing.T) {}\n"}}, nil, true},
		{"a file that does not parse", [][]string{{"a_test.go", marking("TestA"), "b_test.go", "package"}}, nil, true},
		{"a directory that does not exist", [][]string{{"a_test.go", marking("TestA")}, nil}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var dirs []string
			for _, files := range tc.dirs {
				if files == nil {
					dirs = append(dirs, filepath.Join(t.TempDir(), "missing"))
					continue
				}
				m := map[string]string{}
				for i := 0; i < len(files); i += 2 {
					m[files[i]] = files[i+1]
				}
				dirs = append(dirs, write(t, m))
			}
			got, err := find(dirs)
			if (err != nil) != tc.wantErr {
				t.Fatalf("find = %v, %v; want an error %v", got, err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("find = %q, want %q", got, tc.want)
			}
		})
	}
}
