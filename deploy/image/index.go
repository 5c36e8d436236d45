package image

import (
	"errors"
	"fmt"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BuildIndex builds an image of each Config (one binary per architecture)
// and the OCI index listing them by platform: what a registry serves for
// a multi-architecture tag, each node pulling its own. Two Configs of
// one platform are refused.
func BuildIndex(cfgs []Config) (v1.ImageIndex, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("building the image index: no binary")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var platforms []string
	for _, c := range cfgs {
		img, err := Build(c)
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("building the image index: %w", err)
		}
		p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture}
		if slices.Contains(platforms, p.String()) {
			return nil, fmt.Errorf("building the image index: two binaries for %s (%s among them)", p.String(), c.Binary)
		}
		platforms = append(platforms, p.String())
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

// ImageFor is the image of idx for linux on arch.
func ImageFor(idx v1.ImageIndex, arch string) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var have []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			continue
		}
		if d.Platform.OS == "linux" && d.Platform.Architecture == arch {
			return idx.Image(d.Digest)
		}
		have = append(have, d.Platform.String())
	}
	return nil, fmt.Errorf("the image index has no image for linux/%s (it has %v)", arch, have)
}
