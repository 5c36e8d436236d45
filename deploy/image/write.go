package image

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// WriteLayout writes idx as an OCI image layout in dir (created; it must
// not hold a layout already), the index tagged tag
// (org.opencontainers.image.ref.name): what skopeo (copy --all for every
// architecture), podman, crane and containerd import, and what a registry
// push starts from.
func WriteLayout(dir, tag string, idx v1.ImageIndex) error {
	if _, err := os.Stat(dir); err == nil {
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			return fmt.Errorf("writing the OCI layout: %s is not empty", dir)
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout in %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return fmt.Errorf("writing the OCI layout in %s: %w", dir, err)
	}
	return nil
}

// WriteTarball writes img, one architecture's image, as a tarball
// `docker load` and `podman load` read, named ref (for example
// outboxd:v1.2.3).
func WriteTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("writing the image tarball: %w", err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("writing the image tarball %s: %w", path, err)
	}
	return nil
}
