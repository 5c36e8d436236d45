// Command outboxd-image builds outboxd's OCI image from static outboxd
// binaries, one per architecture, without a container engine and without
// pulling a base image (package image), and writes it as an OCI layout
// (an index of every architecture), a tarball of one architecture for
// docker load or podman load, or both.
//
//	for a in amd64 arm64; do
//	  CGO_ENABLED=0 GOARCH=$a go build -trimpath -ldflags "-s -w -X main.version=v1.2.3" -o bin/outboxd-static-$a ./cmd/outboxd
//	done
//	cd deploy/image && go run ./cmd/outboxd-image -binary ../../bin/outboxd-static-amd64 -binary ../../bin/outboxd-static-arm64 \
//	  -version v1.2.3 -oci-layout ../../bin/outboxd-oci -tarball ../../bin/outboxd-image.tar
//
// make image does that. Each binary's architecture is read from it.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/outboxd/outboxd/deploy/image"
)

// binaries is the repeatable -binary flag.
type binaries []string

func (b *binaries) String() string     { return strings.Join(*b, ",") }
func (b *binaries) Set(v string) error { *b = append(*b, v); return nil }

func main() {
	var c image.Config
	var bins binaries
	flag.Var(&bins, "binary", "a static outboxd binary (CGO_ENABLED=0); once per architecture, read from the binary")
	flag.StringVar(&c.Version, "version", "", "the version the binaries were stamped with (-X main.version=)")
	flag.StringVar(&c.Revision, "revision", "", "the source's commit (annotation org.opencontainers.image.revision)")
	flag.StringVar(&c.Source, "source", image.DefaultSource, "the source repository's URL")
	repo := flag.String("repository", "outboxd", "the image's name, tagged with -version")
	ociDir := flag.String("oci-layout", "", "write an OCI image layout, the index of every architecture, into this directory")
	tarPath := flag.String("tarball", "", "write a tarball of one architecture's image, for docker load and podman load, to this file")
	tarArch := flag.String("tarball-arch", runtime.GOARCH, "the architecture of the tarball's image")
	flag.Parse()
	if *ociDir == "" && *tarPath == "" {
		fmt.Fprintln(os.Stderr, "outboxd-image: nothing to write: give -oci-layout DIR, -tarball FILE or both")
		os.Exit(2)
	}
	if len(bins) == 0 {
		fmt.Fprintln(os.Stderr, "outboxd-image: no -binary given")
		os.Exit(2)
	}
	cfgs := make([]image.Config, 0, len(bins))
	for _, b := range bins {
		cb := c
		cb.Binary = b
		cfgs = append(cfgs, cb)
	}
	idx, err := image.BuildIndex(cfgs)
	if err != nil {
		fail(err)
	}
	ref := *repo + ":" + c.Version
	if *ociDir != "" {
		if err := image.WriteLayout(*ociDir, ref, idx); err != nil {
			fail(err)
		}
	}
	if *tarPath != "" {
		img, err := image.ImageFor(idx, *tarArch)
		if err != nil {
			fail(err)
		}
		if err := image.WriteTarball(*tarPath, ref, img); err != nil {
			fail(err)
		}
	}
	digest, err := idx.Digest()
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s %s\n", ref, digest)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "outboxd-image:", err)
	os.Exit(1)
}
