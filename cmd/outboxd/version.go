package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/internal/ops"
)

// version is what the build stamps with -ldflags "-X main.version=v1.2.3"
// (the Dockerfile's VERSION); empty: the module version the Go build
// recorded (see buildVersion).
var version string

// buildVersion is the version outboxd reports: the stamped one, else the
// module version of the build information (go install ...@v1.2.3 records
// v1.2.3; a build from a git checkout a pseudo-version), else "dev".
func buildVersion(stamped string, bi *debug.BuildInfo) string {
	if stamped != "" {
		return stamped
	}
	if bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// describeBuild is what `outboxd version` prints: the version, then from
// the build information the VCS revision ("-dirty" when the checkout had
// changes), its commit time, and the Go version. A line whose value the
// build did not record is left out: go install records no revision, and
// neither does a build without the repository's .git (the Dockerfile's).
// bi is nil for a binary without build information.
func describeBuild(stamped string, bi *debug.BuildInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "outboxd %s\n", buildVersion(stamped, bi))
	revision, vcsTime, goVersion := buildDetails(bi)
	if revision != "" {
		fmt.Fprintf(&b, "revision: %s\n", revision)
	}
	if vcsTime != "" {
		fmt.Fprintf(&b, "time:     %s\n", vcsTime)
	}
	fmt.Fprintf(&b, "go:       %s\n", goVersion)
	return b.String()
}

// buildDetails are the VCS revision ("-dirty" when the checkout had
// changes) and its commit time that the build recorded ("" when it did
// not), and the Go version that built the binary.
func buildDetails(bi *debug.BuildInfo) (revision, vcsTime, goVersion string) {
	goVersion = runtime.Version()
	if bi == nil {
		return "", "", goVersion
	}
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			vcsTime = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision != "" && modified {
		revision += "-dirty"
	}
	if bi.GoVersion != "" {
		goVersion = bi.GoVersion
	}
	return revision, vcsTime, goVersion
}

// registerBuildInfo exports outboxd_build_info on reg.
func registerBuildInfo(reg prometheus.Registerer) error {
	bi := readBuildInfo()
	revision, _, goVersion := buildDetails(bi)
	return ops.RegisterBuildInfo(reg, buildVersion(version, bi), revision, goVersion)
}

// readBuildInfo is the binary's build information, nil when it has none.
func readBuildInfo() *debug.BuildInfo {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi
	}
	return nil
}
