package image

import (
	"archive/tar"
	"context"
	"crypto/x509"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/harness/testenv"
)

const testVersion = "v0.0.0-imagetest"

// staticOutboxd builds outboxd from this repository as the image wants it:
// statically linked, stamped with testVersion.
func staticOutboxd(t *testing.T) string {
	t.Helper()
	bin, remove, err := testbed.BuildStaticOutboxd(testVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	return bin
}

// builtImage builds the image, writes it as an OCI layout and reads it
// back from there, as a user's tools would.
func builtImage(t *testing.T) v1.Image {
	t.Helper()
	built, err := BuildIndex([]Config{{Binary: staticOutboxd(t), Version: testVersion, Revision: "0123abcd"}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := ImageFor(built, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(dir, "outboxd:"+testVersion, built); err != nil {
		t.Fatal(err)
	}
	read, err := ImageFor(layoutIndex(t, dir, "outboxd:"+testVersion), runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	// The tarball for docker load and podman load holds the same image.
	tarPath := filepath.Join(t.TempDir(), "outboxd.tar")
	if err := WriteTarball(tarPath, "outboxd:"+testVersion, img); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("outboxd:" + testVersion)
	if err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatalf("reading the tarball back: %v", err)
	}
	// A docker-load tarball carries the config and the layers, not the OCI
	// manifest (its annotations): the same config (user, entrypoint,
	// labels, the layers' diff IDs) is the same image to run.
	want, _ := read.ConfigName()
	if got, err := fromTar.ConfigName(); err != nil || got != want {
		t.Errorf("the tarball's image config is %s (%v), the layout's %s: want the same", got, err, want)
	}
	// Its layers are there and match the config's diff IDs.
	if err := validate.Image(fromTar); err != nil {
		t.Errorf("the tarball's image does not validate: %v", err)
	}
	return read
}

// layoutIndex is the image index tagged tag in the OCI layout in dir, as
// a user's tools read it.
func layoutIndex(t *testing.T, dir, tag string) v1.ImageIndex {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != tag || m.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("the layout's index = %+v, want one image index named %s", m.Manifests, tag)
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Errorf("the image index does not validate: %v", err)
	}
	return idx
}

// unpack extracts img's file system into a new directory and returns it.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	// The image's user must be able to enter its root once it is chrooted
	// there; t.TempDir makes it the owner's only.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: an entry of type %q, which the image should not have", h.Name, h.Typeflag)
		}
		// Modes and owners as the image has them (MkdirAll and umask would
		// not keep 1777 or 0700).
		if err := os.Chmod(path, fs.FileMode(h.Mode).Perm()|modeBits(h.Mode)); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(path, h.Uid, h.Gid); err != nil {
			t.Fatal(err)
		}
	}
}

func modeBits(m int64) fs.FileMode {
	var b fs.FileMode
	if m&0o1000 != 0 {
		b |= fs.ModeSticky
	}
	return b
}

// The image holds outboxd, CA certificates, its user and an empty /tmp and
// nothing else, no shell; it is OCI, runs as non-root, and names its
// source, version and licence.
func TestImageHoldsOnlyWhatOutboxdNeeds(t *testing.T) {
	img := builtImage(t)
	// Digests, sizes, diff IDs and history agree with the blobs.
	if err := validate.Image(img); err != nil {
		t.Errorf("the image does not validate: %v", err)
	}
	mt, err := img.MediaType()
	if err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type = %s (%v), want %s", mt, err, types.OCIManifestSchema1)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"org.opencontainers.image.source":   DefaultSource,
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": "0123abcd",
		"org.opencontainers.image.licenses": License,
	} {
		if got := m.Annotations[key]; got != want {
			t.Errorf("manifest annotation %s = %q, want %q", key, got, want)
		}
		if got := cf.Config.Labels[key]; got != want {
			t.Errorf("config label %s = %q, want %q", key, got, want)
		}
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/outboxd"}) || !slices.Equal(cf.Config.Cmd, []string{"run"}) {
		t.Errorf("config runs %v %v as %q, want /outboxd run as 65532:65532", cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User)
	}
	if !slices.Equal(cf.Config.Env, []string{"PATH=/", "SSL_CERT_FILE=" + CACertsPath}) {
		t.Errorf("config environment %v, want PATH=/ and SSL_CERT_FILE=%s", cf.Config.Env, CACertsPath)
	}
	if _, ok := cf.Config.ExposedPorts[MetricsPort]; !ok {
		t.Errorf("config exposes %v, want %s", cf.Config.ExposedPorts, MetricsPort)
	}

	root := unpack(t, img)
	checkFiles(t, root)
	pem, err := os.ReadFile(filepath.Join(root, CACertsPath))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) || strings.Count(string(pem), "BEGIN CERTIFICATE") < 100 {
		t.Errorf("%s holds %d certificates, want Mozilla's roots (over 100)", CACertsPath, strings.Count(string(pem), "BEGIN CERTIFICATE"))
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil || !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd = %q (%v), want the nonroot user 65532", passwd, err)
	}
}

// checkFiles checks that the unpacked image at root holds exactly its
// files: outboxd, the CA certificates, its user, an empty /tmp.
func checkFiles(t *testing.T, root string) {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			rel += "/"
		}
		files = append(files, "/"+strings.TrimPrefix(rel, "./"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/", "/etc/", "/etc/group", "/etc/passwd", "/etc/ssl/", "/etc/ssl/certs/", CACertsPath, "/home/", "/home/nonroot/", BinaryPath, "/tmp/"}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("the image holds %v, want exactly %v (no shell, nothing else)", files, want)
	}
}

// A binary the image cannot run is refused when the image is built.
func TestBuildRefusesWhatTheImageCannotRun(t *testing.T) {
	script := filepath.Join(t.TempDir(), "outboxd")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dynamic, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"nothing", Config{}, "Binary: the outboxd binary is required"},
		{"no version", Config{Binary: script}, "Version: required"},
		{"a script", Config{Binary: script, Version: "v1"}, "not an ELF executable"},
		{"a missing file", Config{Binary: script + ".gone", Version: "v1"}, "no such file"},
		{"a dynamically linked binary", Config{Binary: dynamicELF(t, dynamic), Version: "v1"}, "CGO_ENABLED=0"},
		{"another architecture than the binary's", Config{Binary: staticOutboxd(t), Version: "v1", Arch: otherArch()}, "the binary is built for " + runtime.GOARCH + ", not " + otherArch()},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Build(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Build = %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// dynamicELF is a dynamically linked executable of this machine (one that
// names an interpreter, read here without checkStatic): the first of a
// few that every Linux has, else fallback if it is one.
func dynamicELF(t *testing.T, fallback string) string {
	t.Helper()
	for _, p := range []string{"/bin/ls", "/usr/bin/env", fallback} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
		f.Close()
		if dynamic {
			return p
		}
	}
	t.Fatal("no dynamically linked executable found on this machine")
	return ""
}

// inImage is a command of the unpacked image as a container runtime would
// start it: chrooted into root, as the image's user, with its environment.
func inImage(ctx context.Context, t *testing.T, img v1.Image, root string, args ...string) *exec.Cmd {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	uid, gid, ok := strings.Cut(cf.Config.User, ":")
	u, uerr := strconv.Atoi(uid)
	g, gerr := strconv.Atoi(gid)
	if !ok || uerr != nil || gerr != nil || u == 0 {
		t.Fatalf("the image's user %q is not a non-root uid:gid", cf.Config.User)
	}
	cmd := exec.CommandContext(ctx, cf.Config.Entrypoint[0])
	cmd.Path = cf.Config.Entrypoint[0] // inside the chroot, not looked up here
	cmd.Args = append(slices.Clone(cf.Config.Entrypoint), args...)
	cmd.Env = cf.Config.Env
	cmd.Dir = cf.Config.WorkingDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uint32(u), Gid: uint32(g)}}
	return cmd
}

// needsRoot skips where the test cannot chroot (CI runs as root).
func needsRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("running the image's root as its user needs root to chroot, and CI=true must not skip it")
		}
		t.Skip("running the image's root as its user needs root to chroot")
	}
}

// From the unpacked image, as its non-root user: outboxd says its version,
// migrates a database and publishes a row of it to Kafka, then stops
// cleanly on SIGTERM.
func TestImageRunsOutboxdAsItsUser(t *testing.T) {
	needsRoot(t)
	img := builtImage(t)
	root := unpack(t, img)
	ctx := t.Context()

	out, err := inImage(ctx, t, img, root, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), testVersion) {
		t.Fatalf("outboxd version in the image = %q (%v), want it to say %s", out, err, testVersion)
	}

	db := testenv.Database(t)
	brokers := testenv.Brokers(t)
	topic := testenv.Topic(t, 1)
	if out, err := inImage(ctx, t, img, root, "migrate", "--database-url", db).CombinedOutput(); err != nil {
		t.Fatalf("outboxd migrate in the image: %v\n%s", err, out)
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var id string
	if err := conn.QueryRow(ctx, `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (gen_random_uuid(), $1, '{"from": "the image"}') RETURNING id::text`, topic).Scan(&id); err != nil {
		t.Fatal(err)
	}

	run := inImage(ctx, t, img, root, "run", "--database-url", db, "--brokers", strings.Join(brokers, ","))
	var logs strings.Builder
	run.Stdout, run.Stderr = &logs, &logs
	if err := run.Start(); err != nil {
		t.Fatalf("starting outboxd run in the image: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		if run.ProcessState == nil {
			_ = run.Process.Kill()
			<-exited
		}
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := ""
	for got == "" {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "id" && strings.Trim(string(h.Value), `"`) == id {
					got = string(r.Value)
				}
			}
		})
		select {
		case err := <-exited:
			t.Fatalf("outboxd run in the image exited before publishing: %v\n%s", err, logs.String())
		default:
		}
		if ctx.Err() != nil {
			t.Fatalf("outboxd run in the image published nothing before the test's end\n%s", logs.String())
		}
	}
	if !strings.Contains(got, "the image") {
		t.Errorf("published %q, want the row's payload", got)
	}
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("outboxd run in the image after SIGTERM: %v, want a clean exit\n%s", err, logs.String())
	}
	fmt.Fprintf(os.Stderr, "measured: outboxd %s from the unpacked image as uid 65532 published outbox id %s to %s and stopped on SIGTERM\n", testVersion, id, topic)
}

// otherArch is an architecture other than this machine's.
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// Issue 49, item 24: GOARCH=arm64 make image failed with "exec format
// error" (the image tool was built for arm64 and run here), and there was
// no multi-architecture image. make image builds amd64 and arm64 and an
// index of both; the arm64 image's contents are checked without running
// it: the same files, its outboxd built for arm64.
func TestMakeImageBuildsEveryArchitecture(t *testing.T) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/outboxd/outboxd").Output()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("make", "-s", "image", "VERSION="+testVersion, "IMAGE_OUT="+out)
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Env = append(os.Environ(), "GOARCH=arm64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=arm64 make image: %v\n%s", err, b)
	}
	idx := layoutIndex(t, filepath.Join(out, "outboxd-oci"), "outboxd:"+testVersion)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range m.Manifests {
		platforms = append(platforms, d.Platform.String())
	}
	if slices.Sort(platforms); !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("the index lists %v, want linux/amd64 and linux/arm64", platforms)
	}
	for _, tt := range []struct {
		arch    string
		machine elf.Machine
	}{{"amd64", elf.EM_X86_64}, {"arm64", elf.EM_AARCH64}} {
		t.Run(tt.arch, func(t *testing.T) {
			img, err := ImageFor(idx, tt.arch)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate.Image(img); err != nil {
				t.Errorf("the image does not validate: %v", err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != tt.arch {
				t.Errorf("the image's config says %s/%s, want linux/%s", cf.OS, cf.Architecture, tt.arch)
			}
			root := unpack(t, img)
			checkFiles(t, root)
			f, err := elf.Open(filepath.Join(root, BinaryPath))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != tt.machine {
				t.Errorf("its %s is built for %s, want %s", BinaryPath, f.Machine, tt.machine)
			}
		})
	}
	// The tarball for docker load is GOARCH's image.
	fromTar, err := tarball.ImageFromPath(filepath.Join(out, "outboxd-image.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cf, err := fromTar.ConfigFile(); err != nil || cf.Architecture != "arm64" {
		t.Errorf("the tarball's image is for %v (%v), want arm64 (GOARCH)", cf, err)
	}
}
