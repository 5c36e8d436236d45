package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		wantErr bool
		want    []string
	}{
		{"pass with figure and skip", `{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: measured: 42 MiB\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: no server\n"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"pass","Package":"p","Elapsed":1.5}`, false, []string{"TestA: measured: 42 MiB", "skipped p TestB: b_test.go:3: no server", "1 passed, 0 failed, 1 skipped", "ok    p (1.5s)"}},
		{"failure shows output", `{"Action":"output","Package":"p","Test":"TestC","Output":"boom\n"}
{"Action":"fail","Package":"p","Test":"TestC"}
{"Action":"fail","Package":"p"}`, true, []string{"--- FAIL p TestC", "boom", "0 passed, 1 failed, 0 skipped"}},
		{"nothing ran", `{"Action":"pass","Package":"p"}`, true, []string{"0 passed, 0 failed, 0 skipped"}},
		{"build error passes through", "p/x.go:1: syntax error\n", true, []string{"p/x.go:1: syntax error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := run(strings.NewReader(tt.in), &out)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v\n%s", err, tt.wantErr, out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
