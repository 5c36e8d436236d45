// Package image builds outboxd's OCI image without a container engine:
// from a static outboxd binary and files written here, on no base image,
// so that nothing is pulled from a registry. It is a module of its own so
// that the product's go.mod carries none of go-containerregistry's
// dependencies.
//
// Invariants of every image Build returns:
//   - its root holds /outboxd, the CA certificates (Mozilla's, from
//     golang.org/x/crypto/x509roots/fallback) at the path Go reads them
//     from, /etc/passwd and /etc/group naming the non-root user, and an
//     empty /tmp; nothing else, no shell;
//   - it runs as that user (65532, distroless's "nonroot"), `outboxd run`
//     by default;
//   - its manifest and config are OCI, annotated and labelled with the
//     source, version, revision and licence.
package image

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's user, as distroless's nonroot image has it.
const (
	UID  = 65532
	User = "nonroot"
)

// Paths inside the image.
const (
	BinaryPath = "/outboxd"
	// CACertsPath is where Go's crypto/x509 looks first on Linux.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
)

// MetricsPort is the port the image declares for --metrics-addr.
const MetricsPort = "9187/tcp"

// Config is what an image is built from.
type Config struct {
	// Binary is a statically linked outboxd for OS/Arch (CGO_ENABLED=0).
	Binary string
	// Version is the image's version (its annotation and label); it should
	// be what the binary was stamped with (-X main.version=).
	Version string
	// Revision is the source's commit, if known.
	Revision string
	// Source is the repository's URL. Default DefaultSource.
	Source string
	// OS and Arch are the binary's platform, as GOOS and GOARCH name it.
	// Default: linux, and the architecture the binary is built for (its
	// ELF header); an Arch that is not the binary's is refused.
	OS, Arch string
	// Created is the image's creation time. Default: the Unix epoch, so that
	// the same inputs build the same image.
	Created time.Time
}

// DefaultSource is the repository an image names by default.
const DefaultSource = "https://github.com/outboxd/outboxd"

// License is outboxd's licence, as an SPDX expression.
const License = "Apache-2.0"

func (c *Config) validate() error {
	var errs []error
	if c.Binary == "" {
		errs = append(errs, errors.New("Binary: the outboxd binary is required"))
	}
	if c.Version == "" {
		errs = append(errs, errors.New("Version: required (the version the binary was stamped with)"))
	}
	if strings.ContainsAny(c.Version, " \t\n") {
		errs = append(errs, fmt.Errorf("Version %q: must not contain white space", c.Version))
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.OS == "" {
		c.OS = "linux"
	}
	if c.Created.IsZero() {
		c.Created = time.Unix(0, 0).UTC()
	}
	return errors.Join(errs...)
}

// Build builds the image.
func Build(c Config) (v1.Image, error) {
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("building the image: %w", err)
	}
	bin, err := os.ReadFile(c.Binary)
	if err != nil {
		return nil, fmt.Errorf("building the image: %w", err)
	}
	arch, err := checkStatic(bin)
	if err != nil {
		return nil, fmt.Errorf("building the image from %s: %w", c.Binary, err)
	}
	switch {
	case c.Arch == "":
		c.Arch = arch
	case c.Arch != arch:
		return nil, fmt.Errorf("building the image from %s: the binary is built for %s, not %s", c.Binary, arch, c.Arch)
	}
	root, err := rootFS(bin, c.Created)
	if err != nil {
		return nil, fmt.Errorf("building the image: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(root)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("building the image's layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
		Created: v1.Time{Time: c.Created}, CreatedBy: "outboxd deploy/image", Comment: "outboxd " + c.Version + " and its root files",
	}})
	if err != nil {
		return nil, fmt.Errorf("building the image: %w", err)
	}
	// The config Append made holds the layer's diff ID and history; the
	// rest is outboxd's.
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("building the image's config: %w", err)
	}
	cf = cf.DeepCopy()
	labels := c.annotations()
	cf.Created, cf.OS, cf.Architecture = v1.Time{Time: c.Created}, c.OS, c.Arch
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint:   []string{BinaryPath},
		Cmd:          []string{"run"},
		Env:          []string{"PATH=/", "SSL_CERT_FILE=" + CACertsPath},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{MetricsPort: {}},
		Labels:       labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("building the image's config: %w", err)
	}
	annotated, ok := mutate.Annotations(img, labels).(v1.Image)
	if !ok {
		return nil, errors.New("building the image: annotating it gave no image")
	}
	return annotated, nil
}

// annotations are the OCI annotations of the image's manifest, and its
// config's labels.
func (c Config) annotations() map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":       "outboxd",
		"org.opencontainers.image.description": "Publishes a PostgreSQL transactional outbox to Kafka from the write-ahead log",
		"org.opencontainers.image.source":      c.Source,
		"org.opencontainers.image.url":         c.Source,
		"org.opencontainers.image.version":     c.Version,
		"org.opencontainers.image.licenses":    License,
		"org.opencontainers.image.created":     c.Created.Format(time.RFC3339),
	}
	if c.Revision != "" {
		a["org.opencontainers.image.revision"] = c.Revision
	}
	return a
}

// rootFS is the image's one layer, as a tar.
func rootFS(bin []byte, mtime time.Time) ([]byte, error) {
	certs, err := caBundle()
	if err != nil {
		return nil, err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", User, UID, UID, User, User)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", User, UID)
	entries := []struct {
		name string
		mode int64
		body []byte // nil: a directory
		uid  int
	}{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: strings.TrimPrefix(CACertsPath, "/"), mode: 0o644, body: certs},
		{name: "home/", mode: 0o755},
		{name: "home/" + User + "/", mode: 0o700, uid: UID},
		{name: "tmp/", mode: 0o1777},
		{name: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, body: bin},
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX}
		if e.body == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// caBundle is Mozilla's root certificates as PEM, leaving out those NSS
// trusts only with constraints a PEM file cannot carry (certificates
// issued after a distrust date), so that the file trusts no more than NSS.
func caBundle() ([]byte, error) {
	var b bytes.Buffer
	n := 0
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if _, err := x509.ParseCertificate(r.Certificate); err != nil {
			return nil, fmt.Errorf("reading the CA bundle: %w", err)
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("the CA bundle has no certificate")
	}
	return b.Bytes(), nil
}
