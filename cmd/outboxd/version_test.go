package main

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribeBuild(t *testing.T) {
	t.Parallel()
	vcs := func(revision, time, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{
			{Key: "-buildmode", Value: "exe"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: revision},
			{Key: "vcs.time", Value: time},
			{Key: "vcs.modified", Value: modified},
		}
	}
	for _, tc := range []struct {
		name    string
		stamped string
		bi      *debug.BuildInfo
		want    string
	}{
		{
			name: "a build from a clean checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/outboxd/outboxd", Version: "v0.0.0-20261205120740-f97fcf71a42b"},
				Settings: vcs("f97fcf71a42bc57d6ba5e8c8d9dbf12862e36bc9", "2026-12-05T12:07:40Z", "false")},
			want: "outboxd v0.0.0-20261205120740-f97fcf71a42b\nrevision: f97fcf71a42bc57d6ba5e8c8d9dbf12862e36bc9\ntime:     2026-12-05T12:07:40Z\ngo:       go1.26.8\n",
		},
		{
			name: "a build with changes not committed",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261205120740-f97fcf71a42b+dirty"},
				Settings: vcs("f97fcf71a42bc57d6ba5e8c8d9dbf12862e36bc9", "2026-12-05T12:07:40Z", "true")},
			want: "outboxd v0.0.0-20261205120740-f97fcf71a42b+dirty\nrevision: f97fcf71a42bc57d6ba5e8c8d9dbf12862e36bc9-dirty\ntime:     2026-12-05T12:07:40Z\ngo:       go1.26.8\n",
		},
		{
			name: "go install of a release records no revision",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}},
			want: "outboxd v1.2.3\ngo:       go1.26.8\n",
		},
		{
			name:    "the version stamped with -ldflags wins",
			stamped: "v1.2.4-rc1",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
				Settings: vcs("f97fcf71a42bc57d6ba5e8c8d9dbf12862e36bc9", "2026-12-05T12:07:40Z", "false")},
			want: "outboxd v1.2.4-rc1\nrevision: f97fcf71a42bc57d6ba5e8c8d9dbf12862e36bc9\ntime:     2026-12-05T12:07:40Z\ngo:       go1.26.8\n",
		},
		{
			name: "a build outside version control",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			want: "outboxd dev\ngo:       go1.26.8\n",
		},
		{
			name: "no build information",
			want: "outboxd dev\ngo:       " + runtime.Version() + "\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := describeBuild(tc.stamped, tc.bi); got != tc.want {
				t.Errorf("describeBuild:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestVersionCommandPrintsTheBuild runs `outboxd version` in the test
// binary, which has build information of its own: no binary is built.
func TestVersionCommandPrintsTheBuild(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{arg}, &stdout, &stderr, func(string) string { return "" }); code != exitOK {
			t.Fatalf("outboxd %s exited %d: %s", arg, code, stderr.String())
		}
		out := stdout.String()
		if !strings.HasPrefix(out, "outboxd ") || strings.HasPrefix(out, "outboxd \n") {
			t.Errorf("outboxd %s does not start with outboxd and a version:\n%s", arg, out)
		}
		if !strings.HasSuffix(out, "go:       "+runtime.Version()+"\n") {
			t.Errorf("outboxd %s does not end with the Go version %s:\n%s", arg, runtime.Version(), out)
		}
	}
}
