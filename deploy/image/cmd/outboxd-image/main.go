// Command outboxd-image builds outboxd's OCI image from a static outboxd
// binary, without a container engine and without pulling a base image
// (package image), and writes it as an OCI layout, a tarball for docker
// load or podman load, or both.
//
//	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=v1.2.3" -o bin/outboxd-static ./cmd/outboxd
//	cd deploy/image && go run ./cmd/outboxd-image -binary ../../bin/outboxd-static -version v1.2.3 -tarball ../../bin/outboxd-image.tar
//
// make image does both.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/outboxd/outboxd/deploy/image"
)

func main() {
	var c image.Config
	flag.StringVar(&c.Binary, "binary", "", "static outboxd binary (CGO_ENABLED=0)")
	flag.StringVar(&c.Version, "version", "", "the version the binary was stamped with (-X main.version=)")
	flag.StringVar(&c.Revision, "revision", "", "the source's commit (annotation org.opencontainers.image.revision)")
	flag.StringVar(&c.Source, "source", image.DefaultSource, "the source repository's URL")
	flag.StringVar(&c.Arch, "arch", "", "the binary's architecture (default: this machine's)")
	repo := flag.String("repository", "outboxd", "the image's name, tagged with -version")
	ociDir := flag.String("oci-layout", "", "write an OCI image layout into this directory")
	tarPath := flag.String("tarball", "", "write a tarball for docker load and podman load to this file")
	flag.Parse()
	if *ociDir == "" && *tarPath == "" {
		fmt.Fprintln(os.Stderr, "outboxd-image: nothing to write: give -oci-layout DIR, -tarball FILE or both")
		os.Exit(2)
	}
	img, err := image.Build(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxd-image:", err)
		os.Exit(1)
	}
	ref := *repo + ":" + c.Version
	if *ociDir != "" {
		if err := image.WriteLayout(*ociDir, ref, img); err != nil {
			fmt.Fprintln(os.Stderr, "outboxd-image:", err)
			os.Exit(1)
		}
	}
	if *tarPath != "" {
		if err := image.WriteTarball(*tarPath, ref, img); err != nil {
			fmt.Fprintln(os.Stderr, "outboxd-image:", err)
			os.Exit(1)
		}
	}
	digest, err := img.Digest()
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxd-image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s\n", ref, digest)
}
